"""The `tiny` preset: a random Llama model and a byte-level tokenizer, built in memory for fast tests.

Also `save_hf_folder`, which writes any state dict as a Hugging Face folder (config.json + safetensors +
tokenizer files) so tests can round-trip the HF reader and cross-check against `transformers`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from .model_config import ModelConfig, RopeConfig

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from .checkpoint import Checkpoint  # `checkpoint` imports this module at run time

TINY_SEED = 0

# Token ids of the tiny tokenizer: specials first (ids the config also names), then the 256 bytes, then
# reserved specials that fill the vocabulary up to the model's 320 rows so every id the random model can emit
# decodes to something.
TINY_SPECIALS = ("<pad>", "<s>", "</s>", "<|im_start|>", "<|im_end|>")
TINY_BYTE_OFFSET = len(TINY_SPECIALS)
TINY_VOCAB_SIZE = 320

# ChatML, plus the BOS the tokenizer would otherwise add (chat templates are tokenized without specials).
TINY_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def tiny_config() -> ModelConfig:
    """6 layers because Eagle3 captures a low, a middle and a high layer and needs more than 5."""
    return ModelConfig(
        model_type="llama",
        vocab_size=TINY_VOCAB_SIZE,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=6,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        rms_norm_eps=1e-5,
        rope=RopeConfig(theta=10000.0),
        max_position_embeddings=2048,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_ids=(2,),
        name="tiny",
    )


def hf_tensor_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor a Llama-family checkpoint of this config holds, in HF naming and order, with its shape."""
    h, i, v, d = config.hidden_size, config.intermediate_size, config.vocab_size, config.head_dim
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (v, h)}
    for n in range(config.num_hidden_layers):
        p = f"model.layers.{n}."
        shapes[p + "input_layernorm.weight"] = (h,)
        shapes[p + "self_attn.q_proj.weight"] = (config.q_size, h)
        shapes[p + "self_attn.k_proj.weight"] = (config.kv_size, h)
        shapes[p + "self_attn.v_proj.weight"] = (config.kv_size, h)
        if config.attention_bias:
            shapes[p + "self_attn.q_proj.bias"] = (config.q_size,)
            shapes[p + "self_attn.k_proj.bias"] = (config.kv_size,)
            shapes[p + "self_attn.v_proj.bias"] = (config.kv_size,)
        if config.qk_norm:
            shapes[p + "self_attn.q_norm.weight"] = (d,)
            shapes[p + "self_attn.k_norm.weight"] = (d,)
        shapes[p + "self_attn.o_proj.weight"] = (h, config.q_size)
        shapes[p + "post_attention_layernorm.weight"] = (h,)
        shapes[p + "mlp.gate_proj.weight"] = (i, h)
        shapes[p + "mlp.up_proj.weight"] = (i, h)
        shapes[p + "mlp.down_proj.weight"] = (h, i)
    shapes["model.norm.weight"] = (h,)
    if not config.tie_word_embeddings:
        shapes["lm_head.weight"] = (v, h)
    return shapes


def random_state_dict(config: ModelConfig, seed: int = TINY_SEED) -> dict[str, torch.Tensor]:
    """Deterministic float32 weights for any config (same seed, same tensors, on any machine).

    std 0.1 keeps activations and logits spread out (a std of 0.02, as in HF init, gives near-uniform logits
    and therefore meaningless greedy outputs); norm weights sit near 1 with a little noise, so not no-ops.
    """
    gen = torch.Generator().manual_seed(seed)
    out: dict[str, torch.Tensor] = {}
    for name, shape in hf_tensor_shapes(config).items():
        noise = torch.randn(shape, generator=gen, dtype=torch.float32)
        out[name] = 1.0 + 0.05 * noise if name.endswith("norm.weight") else 0.1 * noise
    return out


def _byte_to_char() -> list[str]:
    """The reversible byte -> printable character map of byte-level BPE (as GPT-2 defined it).

    Printable Latin-1 bytes stand for themselves; the rest are shifted past 255 so no token text contains
    whitespace or control characters.
    """
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars: list[str] = []
    shifted = 0
    for b in range(256):
        if b in keep:
            chars.append(chr(b))
        else:
            chars.append(chr(256 + shifted))
            shifted += 1
    return chars


def tiny_tokenizer() -> PreTrainedTokenizerBase:
    """Byte-level tokenizer: every UTF-8 byte is one token, so decode(encode(text)) == text for any text."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    reserved = [f"<|reserved_{k}|>" for k in range(TINY_VOCAB_SIZE - TINY_BYTE_OFFSET - 256)]
    vocab = {tok: idx for idx, tok in enumerate(TINY_SPECIALS)}
    vocab.update({ch: TINY_BYTE_OFFSET + b for b, ch in enumerate(_byte_to_char())})
    vocab.update({tok: TINY_BYTE_OFFSET + 256 + k for k, tok in enumerate(reserved)})
    # BPE without merges splits each pre-token into its byte characters, each of which is in the vocabulary.
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    # No regex split: one pre-token per text; the byte mapping alone guarantees a lossless round trip.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in (*TINY_SPECIALS, *reserved)])
    # Llama-style: the tokenizer itself prepends <s> (encode_prompt relies on the tokenizer's own BOS habit).
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        chat_template=TINY_CHAT_TEMPLATE,
        model_max_length=2048,
    )


def save_hf_folder(
    source: Mapping[str, torch.Tensor] | Checkpoint,
    config: ModelConfig | None,
    path: str | Path,
    shards: int = 1,
    tokenizer: PreTrainedTokenizerBase | None = None,
) -> Path:
    """Write a Hugging Face folder: config.json, model.safetensors (or N shards + index), tokenizer files.

    `source` is a state dict or a `Checkpoint` (then `config` may be None and its tokenizer is saved unless
    one is given). Without any tokenizer the folder has no tokenizer files, which tests use on purpose.
    """
    from safetensors.torch import save_file

    if isinstance(source, Mapping):
        tensors: Iterable[tuple[str, torch.Tensor]] = source.items()
    else:  # a Checkpoint: duck-typed to keep presets free of an import cycle with `checkpoint`
        config = config or source.config
        tokenizer = tokenizer or source.load_tokenizer()
        tensors = source.tensors()
    if config is None:
        raise ValueError("save_hf_folder needs a config when given a plain state dict")
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config.to_hf_dict(), indent=2) + "\n")
    # safetensors refuses views that share storage (tied or sliced tensors): store contiguous copies.
    state = {name: t.detach().contiguous().clone() for name, t in tensors}
    if shards <= 1:
        save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    else:
        weight_map: dict[str, str] = {}
        for k, part in enumerate(_split(list(state), shards)):
            fname = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
            save_file({n: state[n] for n in part}, str(out / fname), metadata={"format": "pt"})
            weight_map.update(dict.fromkeys(part, fname))
        total = sum(t.numel() * t.element_size() for t in state.values())
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    if tokenizer is not None:
        tokenizer.save_pretrained(str(out))
    return out


def _split(names: list[str], parts: int) -> Iterator[list[str]]:
    """Contiguous, nearly equal groups (the way HF shards keep a layer's tensors together)."""
    size, extra = divmod(len(names), parts)
    start = 0
    for k in range(parts):
        end = start + size + (1 if k < extra else 0)
        yield names[start:end]
        start = end
