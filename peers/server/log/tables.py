"""The signature tables: one per engine, as data, each in its engine's profile (`profiles`), gathered here by name,
and the generic signatures every PyTorch engine prints. A new release's wording is one `Signature`.
Wording can change between releases, so each pattern matches a stable part of the message, never the timestamp or
the severity tag; lines whose wording is ours are marked `confirmed=False`.

Which events fail a run is decided by type (`event_types.FAILING_EVENTS`), not here; `fatal` marks
the lines after which the engine cannot answer, so that a run stops at once instead of waiting on requests."""

from __future__ import annotations

from types import MappingProxyType

from ....event_types import (
    CUDA_OOM,
    ENGINE_DEAD,
    NCCL_TIMEOUT,
)
from ...profiles import PROFILES, LogFormat, Signature

S = Signature

# What any PyTorch engine prints, whichever server wraps it: checked after the engine's own signatures.
GENERIC = (
    S(
        "torch.cuda_oom",
        CUDA_OOM,
        r"CUDA out of memory\.(?: Tried to allocate (?P<requested>[\d.]+ ?[KMGT]i?B))?",
        "CUDA out of memory (tried to allocate {requested})",
    ),
    S(
        "nccl.watchdog_timeout",
        NCCL_TIMEOUT,
        r"Watchdog caught collective operation timeout: (?P<work>WorkNCCL\(.*?\)) ran for (?P<ran_ms>\d+) milliseconds",
        "NCCL collective timed out after {ran_ms} ms: {work}",
        fatal=True,
    ),
    # The error classes TensorRT-LLM treats as fatal (pyexecutor/error_classification.py): the CUDA context is gone.
    S(
        "cuda.fatal_error",
        ENGINE_DEAD,
        r"(?i)(?P<error>cudaErrorIllegalAddress|cudaErrorLaunchFailure|device-side assert triggered"
        r"|an illegal memory access was encountered)",
        "fatal CUDA error: {error}",
        fatal=True,
    ),
)
# torchrun / torch.distributed put "[rank0]:" before every line a rank prints.
GENERIC_TAGS = (r"^\[rank\d+\]:\s?",)

# By name: what `--server-log-format` takes.
LOG_FORMATS: MappingProxyType[str, LogFormat] = MappingProxyType(
    {name: profile.log for name, profile in PROFILES.items()}
)
GENERIC_FORMAT = LogFormat("generic", "any PyTorch engine (only what every one of them prints)", ())
