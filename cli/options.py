"""Engine options shared by every command, declared once; defaults come from the config dataclasses.

Each option is validated where it is declared: counts and sizes carry their ranges, names are choices taken from
the registries (so `--help` lists them and a bad value is a usage error, exit status 2), and values with a
syntax of their own (memory sizes, fault specs, layer lists) are parsed by a callback."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

import typer

from ..workers.config import (
    DEVICES,
    DTYPES,
    SPEC_GUARDS,
    WARMUP_MODES,
    EngineConfig,
    KVCacheConfig,
    SamplingParams,
    SpecConfig,
    from_options,
    parse_bytes,
    parse_capture_layers,
)
from ..workers.errors import UserError
from ..workers.kv_cache import KV_CACHE_MANAGERS
from ..workers.spec import SPEC_ALGORITHMS, spec_method

# Defaults come from the config dataclasses, never written twice.
E = EngineConfig()
K = KVCacheConfig()
SP = SamplingParams()
ENGINE = "Engine"

# Choices as Literal types built from the registries: Typer lists them in --help and refuses anything else.
KV_CACHE_CHOICES = Literal[tuple(KV_CACHE_MANAGERS)]  # type: ignore[valid-type]
DTYPE_CHOICES = Literal[DTYPES]  # type: ignore[valid-type]
DEVICE_CHOICES = Literal[DEVICES]  # type: ignore[valid-type]
SPEC_CHOICES = Literal[("none", *SPEC_ALGORITHMS)]  # type: ignore[valid-type]
SPEC_GUARD_CHOICES = Literal[SPEC_GUARDS]  # type: ignore[valid-type]
WARMUP_CHOICES = Literal[WARMUP_MODES]  # type: ignore[valid-type]


def checked(parse: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """An option callback that runs `parse` on the given value (None passes through) and turns its UserError into
    click's usage error, which names the option. The value itself is kept as given."""

    def callback(value: Any) -> Any:
        if value is None or value == []:
            return value
        try:
            parse(value)
        except UserError as e:
            raise typer.BadParameter(str(e)) from None
        return value

    return callback


def _memory_size(text: str) -> None:
    if parse_bytes(text) <= 0:
        raise UserError(f"memory size must be positive, got {text!r}")


def _fault_specs(texts: list[str]) -> None:
    from ..workers.faults import FaultSpec  # late: it imports torch

    for text in texts:
        FaultSpec.parse(text)


Model = Annotated[
    str,
    typer.Option(
        "--model",
        "-m",
        help="'smollm2' (embedded SmolLM2-135M-Instruct GGUF), 'tiny' (random test model), a Hugging Face "
        "folder (config.json + safetensors) or a .gguf file.",
        rich_help_panel=ENGINE,
    ),
]
KVCache = Annotated[
    KV_CACHE_CHOICES,
    typer.Option("--kv-cache", help=f"KV-cache manager: {' | '.join(KV_CACHE_MANAGERS)}.", rich_help_panel=ENGINE),
]
DType = Annotated[
    DTYPE_CHOICES, typer.Option("--dtype", help=f"{' | '.join(DTYPES)} (auto: float32 on CPU, bfloat16 on CUDA).",
                      rich_help_panel=ENGINE),
]  # fmt: skip
Device = Annotated[DEVICE_CHOICES, typer.Option("--device", help=f"{' | '.join(DEVICES)}.", rich_help_panel=ENGINE)]
DeviceMemory = Annotated[
    str | None,
    typer.Option(
        "--device-memory",
        help="Memory budget, e.g. 2GiB. CPU: stands in for device memory (default 4GiB); CUDA: caps it.",
        callback=checked(_memory_size),
        rich_help_panel=ENGINE,
    ),
]
BlockSize = Annotated[
    int, typer.Option("--block-size", min=1, max=1024, help="Tokens per KV block.", rich_help_panel=ENGINE)
]
BlockReuse = Annotated[
    bool, typer.Option("--block-reuse/--no-block-reuse", help="Reuse KV blocks of shared prompt prefixes.",
                       rich_help_panel=ENGINE),
]  # fmt: skip
DecodeCopy = Annotated[
    bool | None,
    typer.Option("--decode-copy/--no-decode-copy",
                 help="Decode over a contiguous copy of each request's KV instead of gathering its blocks every "
                 "step (default: on for CPU, off for CUDA).", rich_help_panel=ENGINE),
]  # fmt: skip
MaxBatch = Annotated[
    int,
    typer.Option("--max-batch-size", "--batch", min=1, help="Requests decoded together.", rich_help_panel=ENGINE),
]
MaxNumTokens = Annotated[
    int, typer.Option("--max-num-tokens", min=1, help="Tokens one forward may carry.", rich_help_panel=ENGINE)
]
MaxSeqLen = Annotated[
    int | None,
    typer.Option("--max-seq-len", min=2, help="Prompt + output tokens per request.", rich_help_panel=ENGINE),
]
TPSize = Annotated[
    int, typer.Option("--tp", min=1, help="Tensor-parallel size (needs that many processes, e.g. under torchrun).",
                      rich_help_panel=ENGINE),
]  # fmt: skip
Seed = Annotated[int, typer.Option("--seed", min=0, help="Seed for sampling.", rich_help_panel=ENGINE)]

FAULTS = "Faults"
Inject = Annotated[
    list[str] | None,
    typer.Option(
        "--inject",
        help="Inject a fault: POINT[:K][@STEP|@random][xCOUNT], POINT one of warmup_oom, prepare_for_spec_dec, "
        "draft_step, target_forward, restore, or a planted bug class: emit_rejected_draft, draft_kv_into_target, "
        "spec_alters_target, rewind_keeps_rejected, accept_off_by_one, sample_key_shift, verify_width_numerics "
        "(repeatable; see selftest --mutants). Example: draft_step:1@3",
        callback=checked(_fault_specs),
        rich_help_panel=FAULTS,
    ),
]
Warmup = Annotated[
    WARMUP_CHOICES,
    typer.Option("--warmup", help="General warmup at the max shapes after KV sizing: auto (CUDA only) | on | off.",
                 rich_help_panel=FAULTS),
]  # fmt: skip
EventsPath = Annotated[
    str | None,
    typer.Option("--events", help="Write events as JSON lines to this file (one file per rank: events.rank{rank}.jsonl "
                 "beside it under torchrun).", rich_help_panel=FAULTS),
]  # fmt: skip
MaxRetries = Annotated[
    int, typer.Option("--max-retries", min=0, max=100, help="Recompute a request whose batch failed at most this "
                      "often.", rich_help_panel=FAULTS),
]  # fmt: skip

SPEC = "Speculative decoding"
S = SpecConfig()
Spec = Annotated[
    SPEC_CHOICES,
    typer.Option(
        "--spec",
        help="none, or a method: " + "; ".join(f"{m}: {spec_method(m).summary}" for m in SPEC_ALGORITHMS) + ".",
        rich_help_panel=SPEC,
    ),
]
DraftLen = Annotated[
    int, typer.Option("--draft-len", "-k", min=1, max=16, help="Draft tokens per step (K).", rich_help_panel=SPEC)
]
DraftModel = Annotated[
    str,
    typer.Option(
        "--draft-model",
        help="'auto' (the trained head that ships for smollm2; random for tiny), 'random' (seeded random Eagle3 "
        "head: a correctness canary, acceptance ~1) or an Eagle3 head folder (config.json + model.safetensors "
        "or pytorch_model.bin).",
        rich_help_panel=SPEC,
    ),
]
SpecGuard = Annotated[
    SPEC_GUARD_CHOICES,
    typer.Option(
        "--spec-guard",
        help="template: restore spec-dec state after a failed forward; none: the historical unsafe behaviour.",
        rich_help_panel=SPEC,
    ),
]
CaptureLayers = Annotated[
    str | None,
    typer.Option("--capture-layers", help="Three target layer ids (input-of-layer), e.g. 2,15,27.",
                 callback=checked(parse_capture_layers), rich_help_panel=SPEC),
]  # fmt: skip


# The one config builder (workers/config.py); commands call it with their flags' values.
engine_config = from_options
