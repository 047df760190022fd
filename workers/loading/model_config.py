"""The shape of a Llama-family decoder, in Hugging Face vocabulary: what a checkpoint says about its model
(`EngineConfig` holds what the user asks an engine to do)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ...errors import UserError

# The architectures we can build: all are "Llama-family" decoders (RMSNorm, RoPE, GQA, SwiGLU).
LLAMA_FAMILY_ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
}
LLAMA_FAMILY_MODEL_TYPES = set(LLAMA_FAMILY_ARCHITECTURES.values())


@dataclass(frozen=True)
class RopeConfig:
    theta: float = 10000.0
    # "default", "linear" or "llama3" (the Llama-3.1 frequency-dependent scaling).
    rope_type: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192

    def __post_init__(self) -> None:
        if self.rope_type not in ("default", "linear", "llama3"):
            raise UserError(f"unsupported rope_scaling type {self.rope_type!r} (known: default, linear, llama3)")


@dataclass(frozen=True)
class ModelConfig:
    """Shape of a Llama-family decoder, in Hugging Face vocabulary."""

    model_type: str  # llama | mistral | qwen2 | qwen3
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-5
    rope: RopeConfig = field(default_factory=RopeConfig)
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = False
    attention_bias: bool = False  # Qwen2: bias on q/k/v
    qk_norm: bool = False  # Qwen3: per-head RMSNorm on q and k
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    name: str = ""

    def __post_init__(self) -> None:
        if self.model_type not in LLAMA_FAMILY_MODEL_TYPES:
            raise UserError(
                f"model type {self.model_type!r} is not Llama-family "
                f"(supported: {', '.join(sorted(LLAMA_FAMILY_MODEL_TYPES))})"
            )
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "head_dim"):
            if getattr(self, name) <= 0:
                raise UserError(f"model config: {name} must be positive, got {getattr(self, name)}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise UserError(
                f"model config: num_attention_heads {self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads {self.num_key_value_heads}"
            )

    @property
    def q_size(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_key_value_heads * self.head_dim

    def valid_tp_sizes(self) -> list[int]:
        """TP sizes that divide both the attention and the KV heads (SmolLM2-135M: 1 and 3)."""
        g = math.gcd(self.num_attention_heads, self.num_key_value_heads)
        return [t for t in range(1, g + 1) if g % t == 0]

    def check_tp_size(self, tp_size: int) -> None:
        if tp_size < 1 or tp_size not in self.valid_tp_sizes():
            raise UserError(
                f"TP size {tp_size} does not divide the model's {self.num_attention_heads} attention heads "
                f"and {self.num_key_value_heads} KV heads (valid: {', '.join(map(str, self.valid_tp_sizes()))})"
            )

    def num_parameters(self) -> int:
        h, i, v = self.hidden_size, self.intermediate_size, self.vocab_size
        attn = h * self.q_size + 2 * h * self.kv_size + self.q_size * h
        if self.attention_bias:
            attn += self.q_size + 2 * self.kv_size
        if self.qk_norm:
            attn += 2 * self.head_dim
        layer = attn + 3 * h * i + 2 * h
        head = 0 if self.tie_word_embeddings else v * h
        return v * h + self.num_hidden_layers * layer + h + head

    @classmethod
    def from_hf_dict(cls, cfg: dict[str, Any], name: str = "") -> ModelConfig:
        """Build from a Hugging Face config.json dict; raises UserError for non-Llama-family configs."""
        archs = cfg.get("architectures") or []
        model_type = cfg.get("model_type")
        if model_type not in LLAMA_FAMILY_MODEL_TYPES:
            known = [LLAMA_FAMILY_ARCHITECTURES[a] for a in archs if a in LLAMA_FAMILY_ARCHITECTURES]
            if not known:
                raise UserError(
                    f"config of {name or 'model'} is not Llama-family (model_type {model_type!r}, "
                    f"architectures {archs}); supported: {', '.join(sorted(LLAMA_FAMILY_ARCHITECTURES))}"
                )
            model_type = known[0]
        try:
            heads = int(cfg["num_attention_heads"])
            hidden = int(cfg["hidden_size"])
            rope = _rope_from_hf(cfg)
            eos = cfg.get("eos_token_id")
            eos_ids = tuple(eos) if isinstance(eos, list) else (() if eos is None else (int(eos),))
            return cls(
                model_type=model_type,
                vocab_size=int(cfg["vocab_size"]),
                hidden_size=hidden,
                intermediate_size=int(cfg["intermediate_size"]),
                num_hidden_layers=int(cfg["num_hidden_layers"]),
                num_attention_heads=heads,
                num_key_value_heads=int(cfg.get("num_key_value_heads") or heads),
                head_dim=int(cfg.get("head_dim") or hidden // heads),
                rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
                rope=rope,
                max_position_embeddings=int(cfg.get("max_position_embeddings", 4096)),
                tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
                attention_bias=bool(cfg.get("attention_bias", model_type == "qwen2")),
                qk_norm=model_type == "qwen3",
                bos_token_id=cfg.get("bos_token_id"),
                eos_token_ids=eos_ids,
                name=name,
            )
        except KeyError as e:
            raise UserError(f"config of {name or 'model'} lacks required field {e.args[0]!r}") from None

    def to_hf_dict(self) -> dict[str, Any]:
        """The config.json a Hugging Face `transformers` class would read (used to save and to cross-check)."""
        arch = {v: k for k, v in LLAMA_FAMILY_ARCHITECTURES.items()}[self.model_type]
        d: dict[str, Any] = {
            "architectures": [arch],
            "model_type": self.model_type,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope.theta,
            "max_position_embeddings": self.max_position_embeddings,
            "tie_word_embeddings": self.tie_word_embeddings,
            "hidden_act": "silu",
            "bos_token_id": self.bos_token_id,
            "eos_token_id": list(self.eos_token_ids) if len(self.eos_token_ids) != 1 else self.eos_token_ids[0],
        }
        if self.model_type in ("llama", "mistral"):
            d["attention_bias"] = self.attention_bias
            d["mlp_bias"] = False
        if self.rope.rope_type != "default":
            d["rope_scaling"] = {"rope_type": self.rope.rope_type, "factor": self.rope.factor}
            if self.rope.rope_type == "llama3":
                d["rope_scaling"].update(
                    low_freq_factor=self.rope.low_freq_factor,
                    high_freq_factor=self.rope.high_freq_factor,
                    original_max_position_embeddings=self.rope.original_max_position_embeddings,
                )
        return d


def _rope_from_hf(cfg: dict[str, Any]) -> RopeConfig:
    # transformers 5 moved rope_theta into `rope_parameters`; older configs keep `rope_theta` + `rope_scaling`.
    params = dict(cfg.get("rope_parameters") or {})
    scaling = dict(cfg.get("rope_scaling") or {})
    merged = {**scaling, **params}
    theta = float(merged.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    rope_type = merged.get("rope_type") or merged.get("type") or "default"
    if rope_type == "default":
        return RopeConfig(theta=theta)
    return RopeConfig(
        theta=theta,
        rope_type=rope_type,
        factor=float(merged.get("factor", 1.0)),
        low_freq_factor=float(merged.get("low_freq_factor", 1.0)),
        high_freq_factor=float(merged.get("high_freq_factor", 4.0)),
        original_max_position_embeddings=int(merged.get("original_max_position_embeddings", 8192)),
    )
