"""`Engine.close()` releases what the engine holds: its KV pool and its model are freed when it returns (no `del` and
`gc.collect()` in the caller), weights it shares with another engine stay with that one, and a closed engine
refuses work in one line."""

from __future__ import annotations

import weakref

import pytest
from specdec_eval.workers.config import SpecConfig
from specdec_eval.workers.engine.engine import Engine

from ...conftest import make_engine


def test_close_frees_the_kv_pool_and_the_model(tiny):
    engine = make_engine(tiny, spec=SpecConfig())
    engine.generate(["The quick brown fox"])
    pool, model, draft = (weakref.ref(x) for x in (engine.kv.pool, engine.model, engine.draft_model))
    engine.close()
    assert pool() is None and model() is None and draft() is None  # freed although `engine` is still referenced
    with pytest.raises(RuntimeError, match="this engine is closed"):
        engine.generate(["again"])
    engine.close()  # a second close is a no-op


def test_close_leaves_shared_weights_with_their_other_engine(tiny):
    first = make_engine(tiny)
    second = Engine.build(first.config, checkpoint=first.checkpoint, tokenizer=first.tokenizer, model=first.model)
    shared = weakref.ref(first.model)
    second.close()
    assert shared() is not None and first.generate(["still here"])[0].token_ids
    first.close()
    assert shared() is None
