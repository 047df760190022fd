"""The engine options, declared once as the fields of `EngineOptions` (flag metadata, as every command's options
are): every command's engine flags, lm-eval's `--model_args` keys and the one builder of an EngineConfig from them,
`from_options`. Each field's default is read from the config field that holds it, so no default is written twice and
a flag cannot drift from the config. No CLI library here: the name is the builder's keyword and every command's
parameter; the flags, the registry its choices come from, the parse that checks a value with a syntax of its own."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import MISSING, dataclass, fields
from types import MappingProxyType
from typing import Any

from ..errors import UserError
from ..option_fields import listed_options, option
from . import bug_classes
from .config import (
    DEVICES,
    DTYPES,
    SPEC_GUARDS,
    SPEC_SAMPLINGS,
    WARMUP_MODES,
    EngineConfig,
    KVCacheConfig,
    SpecConfig,
    parse_bytes,
    parse_capture_layers,
)
from .faults import ENVIRONMENT_POINTS, FaultSpec, behaviour_faults
from .registry import KV_CACHE_MANAGERS, SPEC_ALGORITHMS

ENGINE, SPEC, FAULTS = "Engine", "Speculative decoding", "Faults"  # the groups of `--help`
_OWNERS = MappingProxyType({"": EngineConfig, "kv_cache": KVCacheConfig, "spec": SpecConfig})


def field_default(path: str) -> Any:
    """The default of a config field: "max_batch_size" (EngineConfig), "kv_cache.block_size", "spec.guard"."""
    owner, _, name = path.rpartition(".")
    f = next(f for f in fields(_OWNERS[owner]) if f.name == name)
    return f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]


def config_default(path: str) -> Any:
    """An option's default: its config field's; an empty tuple (no faults) is None on the command line."""
    value = field_default(path)
    return None if value == () else value


def _kv_versions() -> tuple[str, ...]:
    return tuple(KV_CACHE_MANAGERS)


def _spec_names() -> tuple[str, ...]:
    return ("none", *SPEC_ALGORITHMS)


def _memory_size(text: str) -> None:
    if parse_bytes(text) <= 0:
        raise UserError(f"memory size must be positive, got {text!r}")


def _fault_specs(texts: Sequence[str]) -> None:
    for text in texts:
        FaultSpec.parse(text)


@dataclass(frozen=True)
class EngineOptions:
    """The engine options as flat values, each field's default its config field's (the command line shows no faults
    as None, not an empty tuple)."""

    model: str = option(
        config_default("model"),
        "--model",
        "-m",
        group=ENGINE,
        help="'smollm2' (embedded SmolLM2-135M-Instruct GGUF), 'tiny' (random test model), a Hugging Face folder "
        "(config.json + safetensors) or a .gguf file.",
    )
    kv_cache: str = option(
        config_default("kv_cache.version"),
        "--kv-cache",
        group=ENGINE,
        choices=_kv_versions,
        help="KV-cache manager: {choices}.",
    )
    dtype: str = option(
        config_default("dtype"),
        "--dtype",
        group=ENGINE,
        choices=lambda: DTYPES,
        help="{choices} (auto: float32 on CPU, bfloat16 on CUDA).",
    )
    device: str = option(config_default("device"), "--device", group=ENGINE, choices=lambda: DEVICES, help="{choices}.")
    device_memory: str | None = option(
        config_default("device_memory"),
        "--device-memory",
        group=ENGINE,
        parse=_memory_size,
        help="Memory budget, e.g. 2GiB. CPU: stands in for device memory (default 4GiB); CUDA: caps it.",
    )
    block_size: int = option(
        config_default("kv_cache.block_size"),
        "--block-size",
        group=ENGINE,
        min=1,
        max=1024,
        help="Tokens per KV block.",
    )
    block_reuse: bool = option(
        config_default("kv_cache.enable_block_reuse"),
        "--block-reuse/--no-block-reuse",
        group=ENGINE,
        help="Reuse KV blocks of shared prompt prefixes.",
    )
    decode_copy: bool | None = option(
        config_default("kv_cache.decode_copy"),
        "--decode-copy/--no-decode-copy",
        group=ENGINE,
        help="Decode over a contiguous copy of each request's KV instead of gathering its blocks every step "
        "(default: on for CPU, off for CUDA).",
    )
    max_batch_size: int = option(
        config_default("max_batch_size"),
        "--max-batch-size",
        "--batch",
        group=ENGINE,
        min=1,
        help="Requests decoded together.",
    )
    max_num_tokens: int = option(
        config_default("max_num_tokens"), "--max-num-tokens", group=ENGINE, min=1, help="Tokens one forward may carry."
    )
    max_seq_len: int | None = option(
        config_default("max_seq_len"), "--max-seq-len", group=ENGINE, min=2, help="Prompt + output tokens per request."
    )
    tp: int = option(
        config_default("tp_size"),
        "--tp",
        group=ENGINE,
        min=1,
        help="Tensor-parallel size (needs that many processes, e.g. under torchrun).",
    )
    seed: int = option(config_default("seed"), "--seed", group=ENGINE, min=0, help="Seed for sampling.")
    # No config field: the flag's "none" is config.spec None, any other name a SpecConfig of that algorithm.
    spec: str = option(
        "none",
        "--spec",
        group=SPEC,
        choices=_spec_names,
        help="{choices}: eagle3 (one-model draft head), ngram (prompt lookup, no draft model).",
    )
    draft_len: int = option(
        config_default("spec.max_draft_len"),
        "--draft-len",
        "-k",
        group=SPEC,
        min=1,
        max=16,
        help="Draft tokens per step (K).",
    )
    draft_model: str = option(
        config_default("spec.draft_model"),
        "--draft-model",
        group=SPEC,
        help="'auto' (the trained head that ships for smollm2; random for tiny), 'random' (seeded random Eagle3 "
        "head: a correctness canary, acceptance ~1) or an Eagle3 head folder (config.json + "
        "model.safetensors or pytorch_model.bin).",
    )
    spec_guard: str = option(
        config_default("spec.guard"),
        "--spec-guard",
        group=SPEC,
        choices=lambda: SPEC_GUARDS,
        help="template: restore spec-dec state after a failed forward; none: the historical unsafe behaviour.",
    )
    capture_layers: str | None = option(
        config_default("spec.capture_layers"),
        "--capture-layers",
        group=SPEC,
        parse=parse_capture_layers,
        help="Three target layer ids (input-of-layer), e.g. 2,15,27.",
    )
    ngram_size: int | None = option(
        config_default("spec.ngram_size"),
        "--ngram-size",
        group=SPEC,
        min=1,
        max=16,
        help="ngram: tokens matched to find a continuation in the request's own text (n; default 3).",
    )
    spec_sampling: str = option(
        config_default("spec.sampling"),
        "--spec-sampling",
        group=SPEC,
        choices=lambda: SPEC_SAMPLINGS,
        help="How drafts are verified at temperature > 0: coupled (keyed draws: a spec-dec run emits the tokens a "
        "plain run of the same seed does), rejection (rejection sampling with a random stream per request, "
        "as vLLM, SGLang and TensorRT-LLM do: lossless in distribution only), rejection-q (drafts sampled "
        "from the draft head's q, accepted with min(1, p/q)).",
    )
    inject: list[str] | None = option(
        config_default("inject"),
        "--inject",
        group=FAULTS,
        parse=_fault_specs,
        help=f"Inject a fault: POINT[:K][@STEP|@random][xCOUNT], POINT one of {', '.join(ENVIRONMENT_POINTS)}, or "
        f"{bug_classes.inject_help()} (repeatable; see selftest --mutants). Example: draft_step:1@3",
    )
    max_retries: int = option(
        config_default("max_retries"),
        "--max-retries",
        group=FAULTS,
        min=0,
        max=100,
        help="Recompute a request whose batch failed at most this often.",
    )
    warmup: str = option(
        config_default("warmup"),
        "--warmup",
        group=FAULTS,
        choices=lambda: WARMUP_MODES,
        help="General warmup at the max shapes after KV sizing: auto (CUDA only) | on | off.",
    )
    events_path: str | None = option(
        config_default("events_path"),
        "--events",
        group=FAULTS,
        help="Write events as JSON lines to this file (one file per rank: events.rank{rank}.jsonl beside it "
        "under torchrun).",
    )


ENGINE_OPTIONS = listed_options(EngineOptions)
OPTIONS = MappingProxyType({o.name: o for o in ENGINE_OPTIONS})


def from_options(**values: Any) -> EngineConfig:
    """The one builder of an EngineConfig from flat options named as ENGINE_OPTIONS (`--kv-cache` is kv_cache,
    `--spec none|eagle3`, ...); an option not given takes the config's own default. Every command and lm-eval's
    `--model_args` go through it."""
    unknown = set(values) - set(OPTIONS)
    if unknown:
        raise TypeError(f"from_options() got unknown options: {', '.join(sorted(unknown))}")
    v = {name: option.default for name, option in OPTIONS.items()} | values
    spec_cfg = None
    if v["spec"] == "none" and v["inject"]:
        bugs = behaviour_faults(v["inject"])
        if bugs:
            raise UserError(f"--inject {bugs[0]!r} can never fire: it is a bug on a spec-dec code path; add --spec")
    if v["spec"] == "none" and v["spec_sampling"] != field_default("spec.sampling"):
        raise UserError(f"--spec-sampling {v['spec_sampling']} verifies drafts; add --spec (eagle3 or ngram)")
    if v["spec"] != "none":
        layers = parse_capture_layers(v["capture_layers"]) if v["capture_layers"] else None
        spec_cfg = SpecConfig(
            algorithm=v["spec"],
            max_draft_len=v["draft_len"],
            draft_model=v["draft_model"],
            guard=v["spec_guard"],
            capture_layers=layers,
            ngram_size=v["ngram_size"],
            sampling=v["spec_sampling"],
        )
    kv = KVCacheConfig(
        version=v["kv_cache"],
        block_size=v["block_size"],
        enable_block_reuse=v["block_reuse"],
        decode_copy=v["decode_copy"],
    )
    return EngineConfig(
        model=v["model"],
        dtype=v["dtype"],
        device=v["device"],
        tp_size=v["tp"],
        max_batch_size=v["max_batch_size"],
        max_num_tokens=v["max_num_tokens"],
        max_seq_len=v["max_seq_len"],
        kv_cache=kv,
        device_memory=parse_bytes(v["device_memory"]) if v["device_memory"] else None,
        seed=v["seed"],
        spec=spec_cfg,
        inject=tuple(v["inject"] or ()),
        max_retries=v["max_retries"],
        warmup=v["warmup"],
        events_path=v["events_path"],
    )


# Its signature is the list (lm-eval's --model_args reads the keys and value types from it).
from_options.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [
        inspect.Parameter(o.name, inspect.Parameter.KEYWORD_ONLY, default=o.default, annotation=o.type)
        for o in ENGINE_OPTIONS
    ],
    return_annotation=EngineConfig,
)
from_options.__annotations__ = {**{o.name: o.type for o in ENGINE_OPTIONS}, "return": EngineConfig}
