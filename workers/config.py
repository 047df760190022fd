"""What the user asks an engine to do: configuration dataclasses. Each validates itself and raises `UserError`
naming the bad value, checking names against the registries (which name their implementations lazily) and the
fault points; it imports nothing else of the engine. The model's own shape is the loader's `ModelConfig`."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields

from ..errors import UserError
from .faults import REJECTION_POINTS, SPEC_POINTS, FaultSpec
from .registry import KV_CACHE_MANAGERS, method_options, spec_method

MAX_BYTES = 2**63  # sizes are int64 wherever torch and the OS count bytes


def parse_bytes(text: str | int) -> int:
    """'4GiB', '512MiB', '2G', '1000000' -> bytes. Raises UserError on anything else."""
    if isinstance(text, int):
        return text
    s = text.strip().lower().replace(" ", "")
    units = {
        "": 1,
        "b": 1,
        "k": 1000,
        "kb": 1000,
        "kib": 1024,
        "m": 10**6,
        "mb": 10**6,
        "mib": 2**20,
        "g": 10**9,
        "gb": 10**9,
        "gib": 2**30,
        "t": 10**12,
        "tb": 10**12,
        "tib": 2**40,
    }
    num = s.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = s[len(num) :]
    try:
        value = float(num)
    except ValueError:
        raise UserError(f"cannot read memory size {text!r} (examples: 4GiB, 512MiB, 2G)") from None
    if unit not in units or not value >= 0:  # NaN fails this too
        raise UserError(f"cannot read memory size {text!r} (examples: 4GiB, 512MiB, 2G)")
    size = value * units[unit]
    if not size < MAX_BYTES:  # 1e400GiB reads as infinity, which no int holds
        raise UserError(f"memory size {text!r} is beyond any machine (at most 8 EiB)")
    return int(size)


def parse_capture_layers(text: str) -> tuple[int, ...]:
    """'2,15,27' -> (2, 15, 27): three target layer ids >= 0 (the model checks the upper bound)."""
    try:
        layers = tuple(int(x) for x in str(text).split(","))
    except ValueError:
        raise UserError(f"--capture-layers wants three integers like 2,15,27, got {text!r}") from None
    if len(layers) != 3 or min(layers) < 0:
        raise UserError(f"--capture-layers wants three layer ids >= 0 like 2,15,27, got {text!r}")
    return layers


SPEC_GUARDS = ("template", "none")
# How a spec-dec engine verifies drafts at temperature > 0 (the sampling package):
#   coupled      keyed sampling: a draft is accepted when it equals the sample keyed by (seed, position), so a
#                spec-dec run emits exactly the tokens a plain run of the same seed does (identity is checkable)
#   rejection    rejection sampling as vLLM / SGLang / TensorRT-LLM do it: a one-hot draft d is accepted with
#                probability p(d), else the token is drawn from p without d; random numbers streamed per request
#   rejection-q  the same with drafts sampled from the draft head's q: accepted with min(1, p/q), residual
#                norm(max(0, p - q)) (needs a method with a draft model)
SPEC_SAMPLINGS = ("coupled", "rejection", "rejection-q")
WARMUP_MODES = ("auto", "on", "off")


@dataclass(frozen=True)
class SpecConfig:
    """Speculative decoding with one method of the registry. The options common to every
    method come first; each method-specific option is read by the methods whose entry names it, and must stay at
    its default for the others (a `--capture-layers` given to ngram would silently do nothing).

    Eagle3: `draft_model` "auto" (the head that ships for the embedded model, the random head for `tiny`), "random"
    (a seeded random Eagle3 head, for correctness checks) or a folder with an Eagle3 checkpoint (config.json +
    model.safetensors or pytorch_model.bin). ngram: `ngram_size` (n, default 3), no draft model."""

    algorithm: str = "eagle3"
    max_draft_len: int = 3
    draft_model: str = "auto"
    capture_layers: tuple[int, ...] | None = None  # input-of-layer ids; default (2, L//2, L-3)
    # "template": SpecWorkerBase.forward restores saved state in `finally`. "none": the historical unsafe
    # behaviour (no cleanup), kept on purpose so the harness can prove it catches the failure.
    guard: str = "template"
    draft_seed: int = 0
    ngram_size: int | None = None  # ngram: tokens matched (n); None: the method's default
    sampling: str = "coupled"  # how drafts are verified at temperature > 0: one of SPEC_SAMPLINGS

    def __post_init__(self) -> None:
        method = spec_method(self.algorithm)
        if not 1 <= self.max_draft_len <= 16:
            raise UserError(f"max draft len must be in 1..16, got {self.max_draft_len}")
        if self.guard not in SPEC_GUARDS:
            raise UserError(f"unknown spec guard {self.guard!r} (known: {', '.join(SPEC_GUARDS)})")
        if self.sampling not in SPEC_SAMPLINGS:
            raise UserError(f"unknown spec sampling {self.sampling!r} (known: {', '.join(SPEC_SAMPLINGS)})")
        if self.sampling == "rejection-q" and method.draft_builder is None:
            raise UserError(
                f"--spec-sampling rejection-q samples drafts from a draft model's q; {self.algorithm} "
                "has none (use rejection)"
            )
        defaults = {f.name: f.default for f in fields(SpecConfig)}
        for name, owners in method_options().items():
            if name not in method.options and getattr(self, name) != defaults[name]:
                raise UserError(
                    f"spec option {name}={getattr(self, name)!r} applies to {' and '.join(owners)}, "
                    f"not {self.algorithm}"
                )
        if method.check is not None:
            method.check(self)


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
    # blocks every step (the model's decode copy). None: on for CPU, where the gather bounds a decode
    # step, off for CUDA, where the gather is cheap and the copy's memory would come out of the pool's.
    decode_copy: bool | None = None

    def __post_init__(self) -> None:
        if self.version not in KV_CACHE_MANAGERS:
            raise UserError(f"unknown kv-cache version {self.version!r} (known: {', '.join(KV_CACHE_MANAGERS)})")
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
    inject: tuple[str, ...] = ()  # fault injection specs (the faults module)
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
        if self.warmup not in WARMUP_MODES:
            raise UserError(f"warmup must be auto, on or off, got {self.warmup!r}")
        if self.inject:
            self._check_faults_can_fire()
        if self.max_retries < 0:
            raise UserError(f"max retries must be >= 0, got {self.max_retries}")
        if self.max_seq_len is not None and self.max_seq_len < 2:
            raise UserError(f"max seq len must be at least 2, got {self.max_seq_len}")

    def _check_faults_can_fire(self) -> None:
        """Each --inject parses, and can fire in this configuration: a fault that never fires would make a run
        look as if the engine had survived it. (A fault scheduled past the run's last step cannot be known
        here.)"""
        for text in self.inject:
            fault = FaultSpec.parse(text, self.seed)
            # A planted code bug (behaviour fault) is in every engine a run builds, the plain ones too (where its path
            # is never taken); only a user asking for one without --spec is refused (`from_options`).
            if fault.point in SPEC_POINTS and self.spec is None and not fault.is_behaviour:
                raise UserError(f"--inject {text!r} can never fire: {fault.point} is a spec-dec point; add --spec")
            if fault.point in REJECTION_POINTS and self.spec is not None and self.spec.sampling == "coupled":
                raise UserError(
                    f"--inject {text!r} can never fire: it is a bug of the rejection sampler; add "
                    "--spec-sampling rejection"
                )
            k = self.spec.max_draft_len if self.spec is not None else 0
            if fault.point == "draft_step" and fault.arg is not None and k and fault.arg >= k:
                raise UserError(f"--inject {text!r} can never fire: draft steps are 0..{k - 1} with --draft-len {k}")
            if fault.point == "warmup_oom" and not self._runs_warmup():
                raise UserError(
                    f"--inject {text!r} can never fire: the general warmup does not run (--warmup "
                    f"{self.warmup}{' runs it on CUDA only' if self.warmup == 'auto' else ''}); "
                    "add --warmup on"
                )

    def _runs_warmup(self) -> bool:
        """Whether the engine will run the general warmup (on, or auto on CUDA)."""
        if self.warmup != "auto":
            return self.warmup == "on"
        if self.device != "auto":
            return self.device == "cuda"
        import torch  # late: only an --inject warmup_oom with --warmup auto --device auto gets here

        return torch.cuda.is_available()

    def to_dict(self) -> dict:
        """Plain values (JSON-ready): what a torchrun job hands its ranks, and what a run records."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> EngineConfig:
        """Inverse of to_dict; validates like the constructor."""
        d = dict(d)
        kv = KVCacheConfig(**d.pop("kv_cache"))
        spec = d.pop("spec")
        if spec is not None:
            layers = spec.get("capture_layers")
            spec = SpecConfig(**{**spec, "capture_layers": tuple(layers) if layers is not None else None})
        return cls(**{**d, "kv_cache": kv, "spec": spec, "inject": tuple(d.get("inject") or ())})

    @property
    def num_extra_kv_layers(self) -> int:
        """KV layers beyond the target's, in the same pool: what the spec method's entry adds (Eagle3: its draft
        layer; ngram: none)."""
        return spec_method(self.spec.algorithm).extra_kv_layers if self.spec is not None else 0


# Temperatures in (0, GREEDY_BELOW) decode greedily (vLLM's sampling epsilon): sampling tends to the argmax as the
# temperature tends to 0, and dividing float32 logits by ~1e-38 overflows into NaN probabilities, which drew token 0
# every time. Greedy is what such a request asks for; temperature 0 is the same request, said exactly.
GREEDY_BELOW = 1e-5
MAX_LOGPROBS = 20  # top alternatives per token, as OpenAI's chat API allows


@dataclass(frozen=True)
class SamplingParams:
    """Per-request decoding options. temperature 0 (or below GREEDY_BELOW) means greedy."""

    max_new_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0  # 0: no top-k filter
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False
    seed: int | None = None  # None: derived from the engine seed and the request index
    # Record each output token's log-probability and this many top alternatives (None: none; 0: the token's own
    # only). Read from the logits the step already has; the tokens are the same either way.
    logprobs: int | None = None

    def __post_init__(self) -> None:
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_LOGPROBS:
            raise UserError(f"logprobs must be in 0..{MAX_LOGPROBS}, got {self.logprobs}")
        if self.max_new_tokens < 1:
            raise UserError(f"max new tokens must be positive, got {self.max_new_tokens}")
        if not (math.isfinite(self.temperature) and self.temperature >= 0):  # NaN passes a plain `< 0` check
            raise UserError(f"temperature must be >= 0 and finite, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise UserError(f"top-p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise UserError(f"top-k must be >= 0, got {self.top_k}")
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW
