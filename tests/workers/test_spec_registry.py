"""The spec-method registry: every entry validates its options, builds an engine, and names its test id; a method
a test registers works end to end with no other edit (config, engine, KV pool, test id, reference names)."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest
from specdec_eval.evals.run_identity import test_id as run_test_id
from specdec_eval.evals.run_types import EvalOptions
from specdec_eval.workers.config import EngineConfig, SamplingParams, SpecConfig
from specdec_eval.workers.engine.engine import identity_of
from specdec_eval.workers.engine_options import from_options
from specdec_eval.workers.registry import unregister
from specdec_eval.workers.spec import SPEC_ALGORITHMS, SpecMethod, register, spec_method, spec_methods
from specdec_eval.workers.spec.base import DraftInput, SpecWorkerBase

from specdec_eval.errors import UserError

from ..conftest import make_engine

PARAMS = SamplingParams(max_new_tokens=8, ignore_eos=True)
PROMPTS = ["one two one two one", "a b c"]


def _test_id(config: EngineConfig, model_key: str = "HuggingFaceTB/SmolLM2-135M-Instruct") -> str:
    engine = SimpleNamespace(identity=identity_of(config), tokenizer=None)
    return run_test_id(engine, EvalOptions(tasks=[], model_key=model_key))


def test_shipped_methods_are_the_registry():
    assert SPEC_ALGORITHMS == spec_methods() == ("eagle3", "ngram")


def test_eagle3_names_are_unchanged():
    """Existing runs, waives and acceptance references key on these exact strings."""
    for kv in ("v1", "v2"):
        config = EngineConfig(model="smollm2", kv_cache=replace(EngineConfig().kv_cache, version=kv), spec=SpecConfig())
        assert _test_id(config) == (
            f"accuracy/test_specdec.py::TestSmolLM2_135M::test_eagle3[{kv}_kv_cache-one_model-tp1]"
        )
    plain = "accuracy/test_specdec.py::TestSmolLM2_135M::test_auto_dtype[v1_kv_cache-tp1]"
    assert _test_id(EngineConfig(model="smollm2")) == plain
    assert spec_method("eagle3").reference_algo == "Eagle3"


def test_ngram_names():
    config = EngineConfig(model="smollm2", spec=SpecConfig(algorithm="ngram"))
    assert _test_id(config) == "accuracy/test_specdec.py::TestSmolLM2_135M::test_ngram[v1_kv_cache-tp1]"
    assert spec_method("ngram").reference_algo == "NGram"


@pytest.mark.parametrize("name", SPEC_ALGORITHMS)
def test_every_entry_validates_and_builds(tiny, name):
    method = spec_method(name)
    spec = SpecConfig(algorithm=name, max_draft_len=2)
    engine = make_engine(tiny, spec=spec)
    assert isinstance(engine.spec_worker, method.worker_class())
    assert (engine.draft_model is None) == (method.draft_builder is None)
    assert engine.kv_layout.num_layers == engine.model_config.num_hidden_layers + method.extra_kv_layers
    assert engine.scheduler.kv_lookahead == method.kv_lookahead(2)
    assert engine.generate(PROMPTS, PARAMS)[0].stats["acceptance"]["max_draft_len"] == 2
    assert f"::{method.test_function}[" in _test_id(engine.config, "tiny")


def test_options_of_one_method_are_refused_for_another():
    with pytest.raises(UserError, match="capture_layers=.* applies to eagle3, not ngram"):
        SpecConfig(algorithm="ngram", capture_layers=(1, 2, 3))
    with pytest.raises(UserError, match="draft_model='random' applies to eagle3, not ngram"):
        from_options(spec="ngram", draft_model="random")
    with pytest.raises(UserError, match="ngram_size=2 applies to ngram, not eagle3"):
        SpecConfig(algorithm="eagle3", ngram_size=2)
    with pytest.raises(UserError, match="three target layers"):
        SpecConfig(capture_layers=(1, 2))
    with pytest.raises(UserError, match=r"ngram size \(n\) must be in 1..16"):
        SpecConfig(algorithm="ngram", ngram_size=0)
    with pytest.raises(UserError, match="unknown spec-dec algorithm 'medusa' .known: eagle3, ngram"):
        SpecConfig(algorithm="medusa")
    assert SpecConfig(algorithm="ngram", ngram_size=4).ngram_size == 4
    assert from_options(spec="ngram", ngram_size=2).spec.ngram_size == 2


class RepeatLastWorker(SpecWorkerBase):
    """Drafts the last token K times: a method that exists only in this test."""

    def _forward_impl(self, step: DraftInput) -> list[list[int]]:
        return [[e[-1]] * self.K for e in step.emitted]


@pytest.fixture
def repeat_method():
    method = register(
        SpecMethod(
            name="repeat",
            summary="the last token, K times",
            worker=RepeatLastWorker,
            test_params=("no_draft",),
            reference_name="Repeat",
        )
    )
    yield method
    unregister("repeat")


def test_a_method_added_through_the_registry_needs_no_other_edit(tiny, repeat_method):
    plain = [o.token_ids for o in make_engine(tiny).generate(PROMPTS, PARAMS)]
    engine = make_engine(tiny, spec=SpecConfig(algorithm="repeat", max_draft_len=3))
    assert type(engine.spec_worker) is RepeatLastWorker and engine.draft_model is None
    assert [o.token_ids for o in engine.generate(PROMPTS, PARAMS)] == plain  # verification keeps it lossless
    assert engine.last_stats.acceptance["num_cycles"] > 0
    expected = "accuracy/test_specdec.py::Testtiny::test_repeat[v1_kv_cache-no_draft-tp1]"
    assert _test_id(engine.config, "tiny") == expected
    assert engine.config.num_extra_kv_layers == 0
    with pytest.raises(UserError, match="ngram_size=3 applies to ngram, not repeat"):
        SpecConfig(algorithm="repeat", ngram_size=3)


def test_acceptance_references_are_found_per_method():
    from specdec_eval.evals.gates.acceptance_file import find_acceptance_reference, load_acceptance_references

    refs = load_acceptance_references()
    llama = {"model": "meta-llama/Llama-3.1-8B-Instruct", "max_draft_len": 3, "task": "mt_bench"}
    assert "llama3-8b-eagle3" in find_acceptance_reference(refs, **llama)
    assert find_acceptance_reference(refs, method="ngram", **llama) is None  # never an Eagle3 drafter's figure
    ngram = {"T::test_ngram": {"method": "ngram", "ref_al": 1.5}}
    assert find_acceptance_reference(ngram, method="ngram") == "T::test_ngram"
