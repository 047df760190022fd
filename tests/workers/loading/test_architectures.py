"""Every supported architecture variant matches Hugging Face transformers token for token (fp32, greedy):
Llama-3 RoPE scaling, tied embeddings (Llama 2 / SmolLM2 style), Qwen2 (q/k/v bias), Qwen3 (q/k norm, explicit
head_dim), Mistral. Small random models built from configs, same weights on both sides."""

from __future__ import annotations

from dataclasses import replace

import pytest
from specdec_eval.workers.config import SamplingParams
from specdec_eval.workers.loading.checkpoint import Checkpoint
from specdec_eval.workers.loading.hf_reference import build_hf_model, hf_greedy
from specdec_eval.workers.loading.model_config import RopeConfig
from specdec_eval.workers.loading.presets import random_state_dict, tiny_config, tiny_tokenizer

from ...conftest import make_engine
from ...prompts import RAW_PROMPTS

BASE = tiny_config()
VARIANTS = {
    "llama3-rope-scaling": replace(
        BASE,
        rope=RopeConfig(
            theta=500000.0,
            rope_type="llama3",
            factor=8.0,
            low_freq_factor=1.0,
            high_freq_factor=4.0,
            original_max_position_embeddings=64,
        ),
    ),
    "tied-embeddings": replace(BASE, tie_word_embeddings=True),
    "qwen2-bias": replace(BASE, model_type="qwen2", attention_bias=True, rope=RopeConfig(theta=1000000.0)),
    "qwen3-qk-norm": replace(BASE, model_type="qwen3", qk_norm=True, head_dim=32),
    "mistral": replace(BASE, model_type="mistral", num_key_value_heads=1),
}


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


@pytest.mark.parametrize("name", list(VARIANTS))
def test_variant_matches_hf(name, tokenizer):
    config = VARIANTS[name]
    state = random_state_dict(config, seed=3)
    ckpt = Checkpoint(config, f"test:{name}", lambda: iter(state.items()), lambda: tokenizer)
    engine = make_engine((ckpt, tokenizer), "v2")
    prompts = [engine.encode(p * 3) for p in RAW_PROMPTS[:4]]  # long enough to reach the scaled RoPE band
    ours = [o.token_ids for o in engine.generate(prompts, SamplingParams(max_new_tokens=16, ignore_eos=True))]
    hf = build_hf_model(ckpt)
    assert ours == [hf_greedy(hf, [p], 16)[0] for p in prompts]
