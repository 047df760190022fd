"""The engine options, listed once: every command's engine flags (cli/options.py builds them from this list),
lm-eval's `--model_args` keys (evals/pipeline/lm_adapter.py) and the one builder of an EngineConfig from them,
`from_options`. Each entry names the config field that holds its default, so no default is written twice and a
flag cannot drift from the config (tests/workers/test_engine_option_list.py).

Plain data, no CLI library: the name is the builder's keyword and every command's parameter, the flags, the value's
type, the registry its choices come from, the parse that checks a value with a syntax of its own."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import MISSING, dataclass, fields
from types import MappingProxyType
from typing import Any

from ..errors import UserError
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

ENGINE, SPEC, FAULTS = "Engine", "Speculative decoding", "Faults"  # the groups of `--help`
_OWNERS = MappingProxyType({"": EngineConfig, "kv_cache": KVCacheConfig, "spec": SpecConfig})


def field_default(path: str) -> Any:
    """The default of a config field: "max_batch_size" (EngineConfig), "kv_cache.block_size", "spec.guard"."""
    owner, _, name = path.rpartition(".")
    f = next(f for f in fields(_OWNERS[owner]) if f.name == name)
    return f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]


@dataclass(frozen=True)
class EngineOption:
    name: str  # the builder's keyword, every command's parameter, the --model_args key
    flags: tuple[str, ...]  # "--block-reuse/--no-block-reuse" for an on/off pair
    type: Any  # the value as given on the command line: int, str | None, list[str] | None, ...
    field: str | None  # where its default lives in EngineConfig (dotted); None: no field holds the flag's value
    help: str
    group: str = ENGINE
    fixed_default: Any = None  # only where `field` is None
    min: float | None = None
    max: float | None = None
    choices: Callable[[], tuple[str, ...]] | None = None  # late: the registries import the config
    parse: Callable[[Any], Any] | None = None  # raises UserError on a bad value; the flag keeps the text

    @property
    def default(self) -> Any:
        """The config field's default; an empty tuple (no faults) is None on the command line, as typer wants."""
        if self.field is None:
            return self.fixed_default
        value = field_default(self.field)
        return None if value == () else value


def _kv_versions() -> tuple[str, ...]:
    from .kv_cache import KV_CACHE_MANAGERS

    return tuple(KV_CACHE_MANAGERS)


def _spec_names() -> tuple[str, ...]:
    from .spec import SPEC_ALGORITHMS

    return ("none", *SPEC_ALGORITHMS)


def _memory_size(text: str) -> None:
    if parse_bytes(text) <= 0:
        raise UserError(f"memory size must be positive, got {text!r}")


def _fault_specs(texts: Sequence[str]) -> None:
    from .engine.faults import FaultSpec  # late: it imports torch

    for text in texts:
        FaultSpec.parse(text)


ENGINE_OPTIONS: tuple[EngineOption, ...] = (
    EngineOption(
        "model",
        ("--model", "-m"),
        str,
        "model",
        "'smollm2' (embedded SmolLM2-135M-Instruct GGUF), 'tiny' (random test model), a Hugging Face folder "
        "(config.json + safetensors) or a .gguf file.",
    ),
    EngineOption(
        "kv_cache", ("--kv-cache",), str, "kv_cache.version", "KV-cache manager: {choices}.", choices=_kv_versions
    ),
    EngineOption(
        "dtype",
        ("--dtype",),
        str,
        "dtype",
        "{choices} (auto: float32 on CPU, bfloat16 on CUDA).",
        choices=lambda: DTYPES,
    ),
    EngineOption("device", ("--device",), str, "device", "{choices}.", choices=lambda: DEVICES),
    EngineOption(
        "device_memory",
        ("--device-memory",),
        str | None,
        "device_memory",
        "Memory budget, e.g. 2GiB. CPU: stands in for device memory (default 4GiB); CUDA: caps it.",
        parse=_memory_size,
    ),
    EngineOption("block_size", ("--block-size",), int, "kv_cache.block_size", "Tokens per KV block.", min=1, max=1024),
    EngineOption(
        "block_reuse",
        ("--block-reuse/--no-block-reuse",),
        bool,
        "kv_cache.enable_block_reuse",
        "Reuse KV blocks of shared prompt prefixes.",
    ),
    EngineOption(
        "decode_copy",
        ("--decode-copy/--no-decode-copy",),
        bool | None,
        "kv_cache.decode_copy",
        "Decode over a contiguous copy of each request's KV instead of gathering its blocks every step "
        "(default: on for CPU, off for CUDA).",
    ),
    EngineOption(
        "max_batch_size", ("--max-batch-size", "--batch"), int, "max_batch_size", "Requests decoded together.", min=1
    ),
    EngineOption(
        "max_num_tokens", ("--max-num-tokens",), int, "max_num_tokens", "Tokens one forward may carry.", min=1
    ),
    EngineOption(
        "max_seq_len", ("--max-seq-len",), int | None, "max_seq_len", "Prompt + output tokens per request.", min=2
    ),
    EngineOption(
        "tp", ("--tp",), int, "tp_size", "Tensor-parallel size (needs that many processes, e.g. under torchrun).", min=1
    ),
    EngineOption("seed", ("--seed",), int, "seed", "Seed for sampling.", min=0),
    # No field: the flag's "none" is config.spec None, any other name a SpecConfig of that algorithm.
    EngineOption(
        "spec",
        ("--spec",),
        str,
        None,
        "{choices}: eagle3 (one-model draft head), ngram (prompt lookup, no draft model).",
        SPEC,
        fixed_default="none",
        choices=_spec_names,
    ),
    EngineOption(
        "draft_len", ("--draft-len", "-k"), int, "spec.max_draft_len", "Draft tokens per step (K).", SPEC, min=1, max=16
    ),
    EngineOption(
        "draft_model",
        ("--draft-model",),
        str,
        "spec.draft_model",
        "'auto' (the trained head that ships for smollm2; random for tiny), 'random' (seeded random Eagle3 "
        "head: a correctness canary, acceptance ~1) or an Eagle3 head folder (config.json + "
        "model.safetensors or pytorch_model.bin).",
        SPEC,
    ),
    EngineOption(
        "spec_guard",
        ("--spec-guard",),
        str,
        "spec.guard",
        "template: restore spec-dec state after a failed forward; none: the historical unsafe behaviour.",
        SPEC,
        choices=lambda: SPEC_GUARDS,
    ),
    EngineOption(
        "capture_layers",
        ("--capture-layers",),
        str | None,
        "spec.capture_layers",
        "Three target layer ids (input-of-layer), e.g. 2,15,27.",
        SPEC,
        parse=parse_capture_layers,
    ),
    EngineOption(
        "ngram_size",
        ("--ngram-size",),
        int | None,
        "spec.ngram_size",
        "ngram: tokens matched to find a continuation in the request's own text (n; default 3).",
        SPEC,
        min=1,
        max=16,
    ),
    EngineOption(
        "spec_sampling",
        ("--spec-sampling",),
        str,
        "spec.sampling",
        "How drafts are verified at temperature > 0: coupled (keyed draws: a spec-dec run emits the tokens a "
        "plain run of the same seed does), rejection (rejection sampling with a random stream per request, "
        "as vLLM, SGLang and TensorRT-LLM do: lossless in distribution only), rejection-q (drafts sampled "
        "from the draft head's q, accepted with min(1, p/q)).",
        SPEC,
        choices=lambda: SPEC_SAMPLINGS,
    ),
    EngineOption(
        "inject",
        ("--inject",),
        list[str] | None,
        "inject",
        "Inject a fault: POINT[:K][@STEP|@random][xCOUNT], POINT one of warmup_oom, prepare_for_spec_dec, "
        "draft_step, target_forward, restore, or a planted bug class: emit_rejected_draft, "
        "draft_kv_into_target, spec_alters_target, rewind_keeps_rejected, accept_off_by_one, "
        "sample_key_shift, verify_width_numerics, rewind_leaks_blocks, aux_layers_off_by_one, or a sampled "
        "class of --spec-sampling rejection: rejection_greedy, residual_keeps_draft, accept_unit_temperature, "
        "spec_filter_order, accept_neighbour_row, restart_stream (repeatable; see selftest --mutants). "
        "Example: draft_step:1@3",
        FAULTS,
        parse=_fault_specs,
    ),
    EngineOption(
        "max_retries",
        ("--max-retries",),
        int,
        "max_retries",
        "Recompute a request whose batch failed at most this often.",
        FAULTS,
        min=0,
        max=100,
    ),
    EngineOption(
        "warmup",
        ("--warmup",),
        str,
        "warmup",
        "General warmup at the max shapes after KV sizing: auto (CUDA only) | on | off.",
        FAULTS,
        choices=lambda: WARMUP_MODES,
    ),
    EngineOption(
        "events_path",
        ("--events",),
        str | None,
        "events_path",
        "Write events as JSON lines to this file (one file per rank: events.rank{rank}.jsonl beside it "
        "under torchrun).",
        FAULTS,
    ),
)
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
        from .engine.faults import behaviour_faults  # late: faults.py imports torch

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
