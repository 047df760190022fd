"""The Eagle3 head: checkpoint layouts (safetensors, pytorch_model.bin, speculators' layers.0), config
conventions (capture layers, draft RoPE), and errors."""

from __future__ import annotations

import json

import pytest
import torch
from specdec_eval.workers.config import SamplingParams, SpecConfig
from specdec_eval.workers.loading.presets import tiny_config
from specdec_eval.workers.spec.eagle3_head import (
    Eagle3HeadConfig,
    build_draft_model,
    default_capture_layers,
    save_head_folder,
)

from specdec_eval.errors import UserError

from ...conftest import make_engine
from ...prompts import RAW_PROMPTS

PARAMS = SamplingParams(max_new_tokens=12, ignore_eos=True)


def test_default_capture_layers():
    assert default_capture_layers(30) == (2, 15, 27)  # SmolLM2-135M
    assert default_capture_layers(32) == (2, 16, 29)  # Llama-3.1-8B, as in the reference notes
    with pytest.raises(UserError, match="more than 5 layers"):
        default_capture_layers(5)


def _run(tiny, draft_model: str):
    engine = make_engine(tiny, spec=SpecConfig(max_draft_len=3, draft_model=draft_model))
    outs = engine.generate(RAW_PROMPTS[:6], PARAMS)
    return [o.token_ids for o in outs], engine.last_stats.acceptance


@pytest.mark.parametrize("layout", ["safetensors", "bin", "speculators"])
def test_saved_head_loads_and_drafts_identically(tiny, tmp_path, layout):
    head = build_draft_model(tiny_config(), "random", None, seed=0)
    folder = save_head_folder(head, tmp_path / "head")
    if layout != "safetensors":
        from safetensors.torch import load_file

        state = load_file(str(folder / "model.safetensors"))
        (folder / "model.safetensors").unlink()
        if layout == "speculators":
            state = {k.replace("midlayer.", "layers.0."): v for k, v in state.items()}
        torch.save(state, folder / "pytorch_model.bin")
    tokens, acc = _run(tiny, str(folder))
    ref_tokens, ref_acc = _run(tiny, "random")
    assert tokens == ref_tokens
    assert acc == ref_acc  # same drafts, hence the same acceptance counts


def test_published_config_conventions():
    target = tiny_config()
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "vocab_size": 320,
        "draft_vocab_size": 100,
        "rms_norm_eps": 1e-5,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 4]},
    }
    hc = Eagle3HeadConfig.from_json(cfg, target, None)
    assert hc.layer.rope.theta == 10000.0  # no rope_theta: the head's own default, never the target's
    assert hc.capture_layers == (1, 3, 4) and hc.draft_vocab_size == 100
    assert Eagle3HeadConfig.from_json(cfg, target, (2, 3, 4)).capture_layers == (2, 3, 4)  # override wins


def test_d2t_maps_draft_ids_to_target_ids():
    head = build_draft_model(tiny_config(), "random", None, seed=0)
    with torch.no_grad():
        head.d2t.fill_(5)
    hidden = torch.randn(3, 64)
    draft_ids = torch.argmax(head.lm_head(head.norm(hidden)), -1)
    assert head.propose(hidden).tolist() == (draft_ids + 5).tolist()


def test_head_errors(tmp_path):
    target = tiny_config()
    with pytest.raises(UserError, match="not found"):
        build_draft_model(target, str(tmp_path / "nope"), None, 0)
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(UserError, match="no model.safetensors or pytorch_model.bin"):
        build_draft_model(target, str(tmp_path), None, 0)
    with pytest.raises(UserError, match="out of range"):
        build_draft_model(target, "random", (2, 3, 9), 0)
    head = build_draft_model(target, "random", None, 0)
    folder = save_head_folder(head, tmp_path / "h")
    cfg = json.loads((folder / "config.json").read_text())
    cfg["num_key_value_heads"] = 4
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UserError, match="cannot share the target's KV pool"):
        build_draft_model(target, str(folder), None, 0)
