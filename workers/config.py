"""Configuration dataclasses. Each validates itself and raises `UserError` naming the bad value."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from .errors import UserError

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


def parse_bytes(text: str | int) -> int:
    """'4GiB', '512MiB', '2G', '1000000' -> bytes. Raises UserError on anything else."""
    if isinstance(text, int):
        return text
    s = text.strip().lower().replace(" ", "")
    units = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 10**6, "mb": 10**6, "mib": 2**20,
             "g": 10**9, "gb": 10**9, "gib": 2**30, "t": 10**12, "tb": 10**12, "tib": 2**40}  # fmt: skip
    num = s.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = s[len(num) :]
    try:
        value = float(num)
    except ValueError:
        raise UserError(f"cannot read memory size {text!r} (examples: 4GiB, 512MiB, 2G)") from None
    if unit not in units or value < 0:
        raise UserError(f"cannot read memory size {text!r} (examples: 4GiB, 512MiB, 2G)")
    return int(value * units[unit])


KV_CACHE_VERSIONS = ("v1", "v2")
SPEC_ALGORITHMS = ("eagle3",)
SPEC_GUARDS = ("template", "none")


@dataclass(frozen=True)
class SpecConfig:
    """One-model speculative decoding. `draft_model`: "auto" (the head that ships for the embedded model, the
    random head for `tiny`), "random" (a seeded random Eagle3 head, for correctness checks) or a folder with an
    Eagle3 checkpoint (config.json + model.safetensors or pytorch_model.bin)."""

    algorithm: str = "eagle3"
    max_draft_len: int = 3
    draft_model: str = "auto"
    capture_layers: tuple[int, ...] | None = None  # input-of-layer ids; default (2, L//2, L-3)
    # "template": SpecWorkerBase.forward restores saved state in `finally`. "none": the historical unsafe
    # behaviour (no cleanup), kept on purpose so the harness can prove it catches the failure.
    guard: str = "template"
    draft_seed: int = 0

    def __post_init__(self) -> None:
        if self.algorithm not in SPEC_ALGORITHMS:
            raise UserError(f"unknown spec-dec algorithm {self.algorithm!r} (known: {', '.join(SPEC_ALGORITHMS)})")
        if not 1 <= self.max_draft_len <= 16:
            raise UserError(f"max draft len must be in 1..16, got {self.max_draft_len}")
        if self.guard not in SPEC_GUARDS:
            raise UserError(f"unknown spec guard {self.guard!r} (known: {', '.join(SPEC_GUARDS)})")
        if self.capture_layers is not None and len(self.capture_layers) != 3:
            raise UserError(f"Eagle3 captures three target layers, got {list(self.capture_layers)}")


DTYPES = ("auto", "float32", "bfloat16", "float16", "float64")
DEVICES = ("auto", "cpu", "cuda")


@dataclass(frozen=True)
class KVCacheConfig:
    """Paged KV cache. v1 and v2 share the block pool and differ in sizing and reservation (kv_cache/)."""

    version: str = "v1"
    block_size: int = 16  # tokens per block
    free_memory_fraction: float = 0.9  # of device memory left after weights and activations
    max_tokens: int | None = None  # v1: cap on cached tokens; v2: only shapes the byte quota
    max_total_bytes: int | None = None  # v2: byte quota (TensorRT-LLM's max_gpu_total_bytes)
    max_util_for_resume: float = 0.95  # v2: quota = max_tokens * bytes_per_token / this
    enable_block_reuse: bool = True
    # Decoding requests attend over a contiguous copy of their KV kept across steps instead of gathering their
    # blocks every step (workers/kv_cache/decode_copy.py). None: on for CPU, where the gather bounds a decode
    # step, off for CUDA, where the gather is cheap and the copy's memory would come out of the pool's.
    decode_copy: bool | None = None

    def __post_init__(self) -> None:
        if self.version not in KV_CACHE_VERSIONS:
            raise UserError(f"unknown kv-cache version {self.version!r} (known: {', '.join(KV_CACHE_VERSIONS)})")
        if self.block_size < 1:
            raise UserError(f"kv-cache block size must be positive, got {self.block_size}")
        if not 0.0 < self.free_memory_fraction <= 1.0:
            raise UserError(f"free memory fraction must be in (0, 1], got {self.free_memory_fraction}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise UserError(f"kv-cache max tokens must be positive, got {self.max_tokens}")
        if not 0.0 < self.max_util_for_resume <= 1.0:
            raise UserError(f"max_util_for_resume must be in (0, 1], got {self.max_util_for_resume}")


@dataclass(frozen=True)
class EngineConfig:
    """Everything that shapes one engine instance. Field names double as lm-eval `--model_args` keys."""

    model: str = "smollm2"  # "smollm2" (embedded GGUF), "tiny" (random preset), or a path
    dtype: str = "auto"  # auto: float32 on CPU, bfloat16 on CUDA
    device: str = "auto"
    tp_size: int = 1
    max_batch_size: int = 64  # concurrent requests
    max_num_tokens: int = 4096  # tokens one forward may carry
    max_seq_len: int | None = None  # prompt + output; default min(model limit, 4096)
    kv_cache: KVCacheConfig = field(default_factory=KVCacheConfig)
    device_memory: int | None = None  # CPU: memory budget in bytes (default 8 GiB); CUDA: total, if capped
    spec: SpecConfig | None = None  # None: plain decoding
    seed: int = 0
    inject: tuple[str, ...] = ()  # fault injection specs, see workers/faults.py
    max_retries: int = 2  # a request in a batch whose forward raised is recomputed at most this often
    # General warmup at the max shapes after the KV pool is sized: "on", "off", or "auto" (on for CUDA only:
    # on this CPU a 4096-token context forward costs seconds each start).
    warmup: str = "auto"
    # Append events as JSON lines here; "{rank}" is replaced by the rank, so each rank writes its own file.
    events_path: str | None = None

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise UserError(f"unknown dtype {self.dtype!r} (known: {', '.join(DTYPES)})")
        if self.device not in DEVICES:
            raise UserError(f"unknown device {self.device!r} (known: {', '.join(DEVICES)})")
        if self.tp_size < 1:
            raise UserError(f"TP size must be positive, got {self.tp_size}")
        if self.max_batch_size < 1:
            raise UserError(f"max batch size must be positive, got {self.max_batch_size}")
        if self.max_num_tokens < 1:
            raise UserError(f"max num tokens must be positive, got {self.max_num_tokens}")
        if self.inject:
            from .faults import FaultSpec  # late: faults.py imports nothing from here, but keep config light

            for text in self.inject:
                FaultSpec.parse(text, self.seed)
        if self.warmup not in ("auto", "on", "off"):
            raise UserError(f"warmup must be auto, on or off, got {self.warmup!r}")
        if self.max_retries < 0:
            raise UserError(f"max retries must be >= 0, got {self.max_retries}")
        if self.max_seq_len is not None and self.max_seq_len < 2:
            raise UserError(f"max seq len must be at least 2, got {self.max_seq_len}")

    @property
    def num_extra_kv_layers(self) -> int:
        """KV layers beyond the target's: the Eagle3 draft layer lives in the same pool."""
        return 1 if self.spec is not None else 0


@dataclass(frozen=True)
class SamplingParams:
    """Per-request decoding options. temperature 0 means greedy."""

    max_new_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0  # 0: no top-k filter
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False
    seed: int | None = None  # None: derived from the engine seed and the request index

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise UserError(f"max new tokens must be positive, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise UserError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise UserError(f"top-p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise UserError(f"top-k must be >= 0, got {self.top_k}")
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0
