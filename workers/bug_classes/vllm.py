"""The planted classes of the vLLM matrix (`selftest --mutants --engine vllm`), declared once: the test-only vLLM
plugin implements each (it runs inside vLLM's own venv, where this package is not installed; a test holds its
implemented names to these), and the matrix's rows and the docs' table read them. In the matrix's order: the class
that kills vLLM's engine core last. A new vLLM class is one line here and its code in the plugin."""

from __future__ import annotations

from .declaration import ACCEPTANCE, LOSSLESS, PlantedClass

P = PlantedClass

VLLM_CLASSES = (
    P(
        "emit_rejected_draft",
        ("rejection_sampler",),
        LOSSLESS,
        "greedy: the rejected draft emitted in place of the target's token",
        planted_at="`rejection_sample` (the function that decides a step's tokens)",
    ),
    P(
        "bonus_wrong_row",
        ("rejection_sampler",),
        LOSSLESS,
        "the bonus token sampled from the logits row before its own",
        planted_at="`RejectionSampler.forward`",
    ),
    P(
        "drop_accepted",
        ("rejection_sampler",),
        LOSSLESS,
        "the first accepted draft of a step dropped from its tokens",
        planted_at="`rejection_sample`",
    ),
    P(
        "duplicate_accepted",
        ("rejection_sampler",),
        LOSSLESS,
        "the first accepted draft of a step emitted twice",
        planted_at="`rejection_sample`",
    ),
    P(
        "draft_never_matches",
        ("proposer",),
        ACCEPTANCE,
        "every draft one token id off: acceptance collapses, outputs unchanged",
        planted_at="the proposers' `propose` (Eagle's and n-gram's)",
    ),
    P(
        "oom_first_spec_step",
        ("proposer",),
        "events",
        "the seed's shape: an out-of-memory error in the first speculative step, after the drafter advanced its state",
        planted_at="the proposers' `propose`",
    ),
)
