"""Read a llama.cpp GGUF file: model config from its metadata, tensors dequantised to float32 in HF naming.

Supported architectures: llama (which also covers Mistral and SmolLM2), qwen2 and qwen3.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ...errors import UserError
from .model_config import ModelConfig, RopeConfig

if TYPE_CHECKING:
    from gguf import GGUFReader
    from transformers import PreTrainedTokenizerBase

SUPPORTED_ARCHITECTURES = ("llama", "qwen2", "qwen3")

# GGUF tensor name -> HF name. Layer tensors are "blk.{i}.<key>.{weight,bias}".
_GLOBAL_NAMES = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}
_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_LAYER_RE = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")
# llama.cpp stores Llama-3.1 rope scaling as precomputed per-frequency factors, not as metadata.
_ROPE_FREQS = "rope_freqs.weight"


def open_gguf(path: Path) -> GGUFReader:
    """Parse the header (slow for big vocabularies: the gguf package reads every token string up front)."""
    from gguf import GGUFReader

    try:
        return GGUFReader(str(path))
    except (ValueError, OSError) as e:  # a truncated or non-GGUF file
        raise UserError(f"cannot read GGUF file {path}: {e}") from None


def hf_name(gguf_name: str) -> str | None:
    """HF name of a GGUF tensor, or None when it has no counterpart we know."""
    stem, _, kind = gguf_name.rpartition(".")
    if stem in _GLOBAL_NAMES and kind == "weight":
        return f"{_GLOBAL_NAMES[stem]}.weight"
    m = _LAYER_RE.fullmatch(gguf_name)
    if m and m.group(2) in _LAYER_NAMES:
        return f"model.layers.{m.group(1)}.{_LAYER_NAMES[m.group(2)]}.{m.group(3)}"
    return None


def _field(reader: GGUFReader, key: str, default: Any = None) -> Any:
    f = reader.get_field(key)
    return default if f is None else f.contents()


def _f32(x: float) -> float:
    """GGUF stores floats as float32: 1e-5 comes back as 9.9999997e-06. Use the shortest decimal that
    round-trips through float32, which is the value the model's author wrote."""
    return float(str(np.float32(x)))


def read_config(reader: GGUFReader, path: Path) -> ModelConfig:
    arch = _field(reader, "general.architecture")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise UserError(
            f"GGUF {path.name}: architecture {arch!r} is not Llama-family "
            f"(supported: {', '.join(SUPPORTED_ARCHITECTURES)})"
        )
    names = {t.name: t for t in reader.tensors}
    unknown = [n for n in names if n != _ROPE_FREQS and hf_name(n) is None]
    if unknown:
        raise UserError(f"GGUF {path.name}: unsupported tensors for a {arch} model: {', '.join(unknown[:5])}")
    if "token_embd.weight" not in names:
        raise UserError(f"GGUF {path.name}: no token_embd.weight tensor")

    def meta(key: str, default: Any = None) -> Any:
        value = _field(reader, f"{arch}.{key}", default)
        if value is None:
            raise UserError(f"GGUF {path.name}: metadata {arch}.{key} is missing")
        return value

    hidden = int(meta("embedding_length"))
    heads = int(meta("attention.head_count"))
    # key_length is written when head_dim != hidden / heads (Qwen3); otherwise it is implied.
    head_dim = int(meta("attention.key_length", hidden // heads))
    # ReaderTensor.shape is in GGML order (columns first): token_embd is [hidden, vocab].
    vocab = int(names["token_embd.weight"].shape[-1])
    eos_ids = [
        int(v)
        for key in ("eos_token_id", "eot_token_id", "eom_token_id")
        if (v := _field(reader, f"tokenizer.ggml.{key}")) is not None
    ]
    bos = _field(reader, "tokenizer.ggml.bos_token_id")
    return ModelConfig(
        model_type=arch,
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=int(meta("feed_forward_length")),
        num_hidden_layers=int(meta("block_count")),
        num_attention_heads=heads,
        num_key_value_heads=int(meta("attention.head_count_kv", heads)),
        head_dim=head_dim,
        rms_norm_eps=_f32(meta("attention.layer_norm_rms_epsilon")),
        rope=_read_rope(reader, arch, path, names, head_dim),
        max_position_embeddings=int(meta("context_length", 4096)),
        tie_word_embeddings="output.weight" not in names,
        attention_bias="blk.0.attn_q.bias" in names,
        qk_norm="blk.0.attn_q_norm.weight" in names,
        bos_token_id=None if bos is None else int(bos),
        eos_token_ids=tuple(dict.fromkeys(eos_ids)),
        name=str(_field(reader, "general.name", path.stem)),
    )


def _read_rope(reader: GGUFReader, arch: str, path: Path, names: dict[str, Any], head_dim: int) -> RopeConfig:
    theta = _f32(_field(reader, f"{arch}.rope.freq_base", 10000.0))
    scaling = _field(reader, f"{arch}.rope.scaling.type", "none")
    if _ROPE_FREQS in names:
        factors = _dequantize(names[_ROPE_FREQS]).reshape(-1)
        return _match_llama3_rope(theta, head_dim, factors, path)
    if scaling == "none":
        return RopeConfig(theta=theta)
    if scaling == "linear":
        return RopeConfig(theta=theta, rope_type="linear", factor=_f32(_field(reader, f"{arch}.rope.scaling.factor")))
    raise UserError(f"GGUF {path.name}: rope scaling {scaling!r} is not supported (known: none, linear, llama3)")


def llama3_rope_factors(rope: RopeConfig, head_dim: int) -> np.ndarray:
    """The per-frequency divisors llama.cpp writes as rope_freqs.weight for Llama-3.1-style scaling."""
    inv_freq = 1.0 / rope.theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    wavelen = 2 * math.pi / inv_freq
    low_wavelen = rope.original_max_position_embeddings / rope.low_freq_factor
    high_wavelen = rope.original_max_position_embeddings / rope.high_freq_factor
    smooth = (rope.original_max_position_embeddings / wavelen - rope.low_freq_factor) / (
        rope.high_freq_factor - rope.low_freq_factor
    )
    mid = 1.0 / ((1 - smooth) / rope.factor + smooth)
    return np.where(wavelen < high_wavelen, 1.0, np.where(wavelen > low_wavelen, rope.factor, mid))


def _match_llama3_rope(theta: float, head_dim: int, factors: np.ndarray, path: Path) -> RopeConfig:
    # The file keeps only the resulting factors; recover the parameters by trying the published Llama 3.x ones
    # (3.1: factor 8, 3.2: factor 32; low 1, high 4, original context 8192).
    for factor in (8.0, 32.0, 16.0, 4.0, 2.0):
        rope = RopeConfig(theta=theta, rope_type="llama3", factor=factor)
        expected = llama3_rope_factors(rope, head_dim)
        if expected.shape == factors.shape and np.allclose(expected, factors, rtol=1e-4):
            return rope
    raise UserError(f"GGUF {path.name}: rope_freqs.weight does not match any known Llama-3 rope scaling")


def _dequantize(tensor: Any) -> np.ndarray:
    from gguf.quants import dequantize

    w = dequantize(tensor.data, tensor.tensor_type)
    # F32 data comes back as a view of the read-only memmap; copy it so torch gets writable memory it owns.
    if not w.flags.writeable or w.dtype != np.float32:
        w = np.array(w, dtype=np.float32)
    return w


def unpermute_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's q/k row permutation for llama-arch models.

    HF Llama rotates the two halves of each head (rotate_half); GGML's llama rope rotates adjacent pairs. The
    converter therefore interleaves each head's rows: HF row j of the first half goes to 2j and of the second
    half to 2j+1. Reading pairs back as (head, pair, 2) and swapping the last two axes restores HF order.
    """
    rest = w.shape[1:]
    half = w.shape[0] // n_heads // 2
    return w.reshape(n_heads, half, 2, *rest).swapaxes(1, 2).reshape(w.shape)


def iter_tensors(reader: GGUFReader, config: ModelConfig) -> Iterator[tuple[str, torch.Tensor]]:
    """Dequantise one tensor at a time, in file order, so peak memory stays at one float32 tensor."""
    # Only llama-arch conversions permute q/k; qwen2/qwen3 use GGML's NeoX rope, which matches HF as is.
    permuted = config.model_type == "llama"
    for t in reader.tensors:
        name = hf_name(t.name)
        if name is None:  # rope_freqs.weight: already folded into config.rope
            continue
        # The reader already presents data as [rows, cols] (HF's [out, in]); ne order is reversed.
        w = _dequantize(t).reshape(tuple(int(x) for x in reversed(t.shape)))
        if permuted and ".self_attn.q_proj." in name:
            w = unpermute_rows(w, config.num_attention_heads)
        elif permuted and ".self_attn.k_proj." in name:
            w = unpermute_rows(w, config.num_key_value_heads)
        yield name, torch.from_numpy(np.ascontiguousarray(w))


def load_tokenizer(reader: GGUFReader, path: Path) -> PreTrainedTokenizerBase:
    """transformers rebuilds a fast tokenizer (vocab, merges, specials, chat template) from GGUF metadata."""
    if reader.get_field("tokenizer.ggml.tokens") is None:
        raise UserError(f"GGUF {path.name} has no tokenizer (metadata tokenizer.ggml.tokens is missing)")
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name, local_files_only=True)
    except (ValueError, KeyError, NotImplementedError) as e:
        raise UserError(f"cannot build a tokenizer from GGUF {path.name}: {e}") from None
