"""The spec worker's narrow surface: it gets what it drafts with (no KV bookkeeping), returns the drafts as a value,
and the executor commits them and discards the KV of rejected drafts."""

from __future__ import annotations

from dataclasses import fields

import pytest
from specdec_eval.workers.config import SamplingParams, SpecConfig
from specdec_eval.workers.spec.base import DraftInput, Drafts, SpecContext

from ...conftest import make_engine
from ...prompts import RAW_PROMPTS

PARAMS = SamplingParams(max_new_tokens=12, ignore_eos=True)


def test_a_spec_worker_gets_no_kv_bookkeeping_and_no_target_model():
    names = {f.name for f in fields(SpecContext)}
    assert names == {"spec", "events", "memory", "faults", "drafter"}
    assert Drafts.of([[1, 2]]) == Drafts([[1, 2]], None)  # a worker without q may return the token lists


@pytest.mark.parametrize("algorithm", ["ngram", "eagle3"])
def test_the_executor_discards_the_kv_of_rejected_drafts_after_every_step(tiny, algorithm):
    """Under KV v2 a rewind gives back the blocks that hold only rejected drafts: after every step each running
    request holds the blocks of what it verified, no more (the worker drafts and never touches the KV manager)."""
    engine = make_engine(tiny, "v2", kv_block_size=2, spec=SpecConfig(algorithm=algorithm, max_draft_len=4))
    manager = engine.kv_manager
    for prompt in RAW_PROMPTS[:3]:
        engine.add_request(prompt, PARAMS)
    steps_with_drafts = 0
    while engine.has_unfinished_requests:
        engine.step()
        for req in engine.scheduler.running:
            assert len(manager.block_table(req.request_id)) == manager.blocks_for(req.num_computed_tokens)
            steps_with_drafts += bool(req.draft_tokens)
    assert steps_with_drafts > 0


def test_the_worker_returns_sampled_drafts_q_and_the_executor_hands_it_to_the_request(tiny):
    engine = make_engine(tiny, spec=SpecConfig(max_draft_len=3, sampling="rejection-q"))
    seen: list[Drafts] = []
    forward = engine.executor.spec.forward

    def recording(step: DraftInput) -> Drafts:
        seen.append(forward(step))
        return seen[-1]

    engine.executor.spec.forward = recording
    engine.add_request(RAW_PROMPTS[0], SamplingParams(max_new_tokens=8, temperature=0.8, seed=1, ignore_eos=True))
    engine.step()  # the context step drafts the first K
    (req,) = engine.scheduler.running
    (drafts,) = seen
    assert req.draft_tokens == drafts.tokens[0] and len(drafts.tokens[0]) == 3
    assert drafts.probs is not None and req.draft_probs is drafts.probs[0]
    assert tuple(req.draft_probs.shape) == (3, engine.model_config.vocab_size)
