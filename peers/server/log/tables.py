"""The signature tables: one per engine, as data. A new engine is one `LogFormat`; a new release's wording is one
`Signature`. Wording can change between releases, so each pattern matches a stable part of the message, never the
timestamp or the severity tag; lines whose wording is ours are marked `confirmed=False`.

Which events fail a run is decided by type (`event_types.FAILING_EVENTS`), not here; `fatal` marks
the lines after which the engine cannot answer, so that a run stops at once instead of waiting on requests."""

from __future__ import annotations

from types import MappingProxyType

from ....event_types import (
    CUDA_GRAPH_FAILED,
    CUDA_OOM,
    ENGINE_DEAD,
    FORWARD_ERROR,
    KV_BLOCK_LEAK,
    KV_EXHAUSTED,
    NCCL_TIMEOUT,
    REQUEST_FAILED,
    SPEC_STATE_LEAK,
    SPEC_STATE_RESTORED,
    WARMUP_OOM,
    WARMUP_SKIPPED,
)
from .signature import LogFormat, Signature

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

TRTLLM = LogFormat(
    name="trtllm",
    engine="TensorRT-LLM (trtllm-serve, PyTorch backend)",
    signatures=(
        S(
            "trtllm.warmup_oom",
            WARMUP_OOM,
            r"OOM during general warmup with (?P<num_tokens>\d+) tokens, (?P<num_gen_tokens>\d+) generation tokens\. "
            r"Skipping",
            "general warmup ran out of memory at {num_tokens} tokens ({num_gen_tokens} generation)",
            fields=(("phase", "general"),),
        ),
        S(
            "trtllm.warmup_skipped",
            WARMUP_SKIPPED,
            r"Skipping general warmup with (?P<num_tokens>\d+) tokens \((?P<num_gen_tokens>\d+) generation\): not "
            r"enough KV cache space",
            "general warmup at {num_tokens} tokens skipped: not enough KV cache space",
        ),
        S(
            "trtllm.warmup_shape_skipped",
            WARMUP_SKIPPED,
            r"Skipping warmup shape \((?P<shape>.*)\): not enough KV "
            r"cache space",
            "warmup shape ({shape}) skipped: not enough KV cache space",
        ),
        S(
            "trtllm.cuda_graph_warmup_skipped",
            WARMUP_SKIPPED,
            r"Skipping CUDA graph warmup \((?P<label>.*?)\) for batch size=(?P<batch_size>\d+), "
            r"draft_len=(?P<draft_len>\d+): not enough KV cache space",
            "CUDA-graph warmup ({label}) at batch size {batch_size} skipped: not enough KV cache space",
        ),
        S(
            "trtllm.warmup_desync",
            ENGINE_DEAD,
            r"Warmup batch creation failed on TP rank\(s\) (?P<ranks>.*?) but succeeded on others",
            "warmup failed on TP rank(s) {ranks} only: a collective deadlock",
            fatal=True,
        ),
        # A bare `assert len(self._saved_tensors) == 0` (AttentionMetadata.prepare_for_spec_dec): no message, so the
        # traceback's source line is the signature. Then "Encountered an error in forward function: " (empty).
        S(
            "trtllm.saved_tensors_assert",
            SPEC_STATE_LEAK,
            r"assert len\(self\._saved_tensors\) == 0",
            "attention metadata saved for spec-dec was never restored (prepare_for_spec_dec's assertion)",
            in_traceback=True,
            fields=(("detected_at", "prepare_for_spec_dec"),),
        ),
        S(
            "trtllm.spec_state_restored",
            SPEC_STATE_RESTORED,
            r"Spec-dec worker forward failed between prepare_for_spec_dec and restore_from_spec_dec; restoring attn "
            r"metadata state",
            "spec-dec worker forward failed; attention metadata restored",
        ),
        S(
            "trtllm.forward_error",
            FORWARD_ERROR,
            r"Encountered an error in forward function: ?(?P<error>.*)$",
            "forward failed: {error}",
            traceback="before",
        ),
        S(
            "trtllm.sampling_error",
            FORWARD_ERROR,
            r"Encountered an error in sampling: ?(?P<error>.*)$",
            "sampling failed: {error}",
            traceback="before",
            fields=(("phase", "sampling"),),
        ),
        # The executor thread is dead after this: in-flight requests get the error, later ones hang (#13318).
        S(
            "trtllm.event_loop_died",
            ENGINE_DEAD,
            r"Error in event loop: ?(?P<error>.*)$",
            "executor loop died: {error}",
            fatal=True,
            traceback="after",
        ),
    ),
    line_tags=(r"^\[\d\d/\d\d/\d{4}-\d\d:\d\d:\d\d\] \[TRT-LLM\](?: \[MPI_Rank \d+\])? \[[FEWIV]\] ?",),
    rank_pattern=r"\[MPI_Rank (?P<server_rank>\d+)\]",
    markers=("[TRT-LLM]", "[TensorRT-LLM]", "tensorrt_llm"),
    owners=("tensorrt_llm", "tensorrt-llm", "trtllm"),
)

VLLM = LogFormat(
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
    owners=("vllm",),
)

SGLANG = LogFormat(
    name="sglang",
    engine="SGLang (sglang.launch_server)",
    signatures=(
        S(
            "sglang.retract",
            KV_EXHAUSTED,
            r"KV cache pool is full\. Retract requests\. #retracted_reqs: "
            r"(?P<retracted>\d+)",
            "KV cache pool full: {retracted} request(s) retracted",
        ),
        S(
            "sglang.abort_after_retract",
            REQUEST_FAILED,
            r"Out of memory even after retracting all other requests in the decode batch\. Aborting the last request",
            "a request aborted: out of KV memory even after retracting the rest of its batch",
        ),
        S(
            "sglang.prefill_oom",
            KV_EXHAUSTED,
            r"Prefill out of memory\. Try to lower your batch size",
            "prefill out of KV memory",
            fields=(("phase", "prefill"),),
        ),
        S(
            "sglang.decode_oom",
            KV_EXHAUSTED,
            r"Decode out of memory",
            "decode out of KV memory",
            fields=(("phase", "decode"),),
        ),
        S(
            "sglang.not_enough_memory",
            CUDA_OOM,
            r"Not enough memory\. Please try to increase --mem-fraction-static",
            "not enough device memory at startup",
            fields=(("phase", "startup"),),
        ),
        S(
            "sglang.cuda_graph_failed",
            CUDA_GRAPH_FAILED,
            r"Capture cuda graph failed: ?(?P<error>.*)$",
            "CUDA-graph capture failed: {error}",
        ),
        S(
            "sglang.scheduler_exception",
            ENGINE_DEAD,
            r"Scheduler hit an exception: ?(?P<error>.*)$",
            "scheduler died: {error}",
            fatal=True,
            traceback="after",
        ),
        # Its idle self-check (a KV memory-leak check in the scheduler); the exact text is unconfirmed.
        S(
            "sglang.memory_leak",
            KV_BLOCK_LEAK,
            r"(?i)memory leak detected",
            "the engine found leaked KV memory",
            confirmed=False,
        ),
    ),
    line_tags=(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?: [A-Z]+\d+)*\] ?",),
    rank_pattern=r"\bTP(?P<server_rank>\d+)\]",
    markers=("sglang", "Decode batch, #running-req", "Prefill batch"),
    owners=("sglang",),
)

LLAMACPP = LogFormat(
    name="llamacpp",
    engine="llama.cpp server (llama-server, llama-cpp-python)",
    signatures=(
        S(
            "llamacpp.kv_no_space",
            KV_EXHAUSTED,
            r"failed to find free space in the KV cache",
            "no free space in the KV cache: retried with a smaller batch",
        ),
        S("llamacpp.cuda_malloc_failed", CUDA_OOM, r"cudaMalloc failed", "cudaMalloc failed"),
        # The HTTP 500 it answers; that the log repeats it is our assumption.
        S(
            "llamacpp.context_exceeded",
            REQUEST_FAILED,
            r"Context size has been exceeded",
            "a request failed: context size exceeded",
            confirmed=False,
        ),
    ),
    markers=("llama_", "ggml_", "llama.cpp", "llama_cpp"),
    owners=("llamacpp", "llama.cpp", "llama-cpp"),
)

SPECDEC = LogFormat(
    name="specdec-eval",
    engine="specdec-eval serve (ours)",
    signatures=(
        # Our engine's every event, one line each (`events.event_line`): the line carries its type.
        S("specdec.event_line", None, r"specdec-eval event: \{", "{type}"),
        S(
            "specdec.engine_loop_failed",
            ENGINE_DEAD,
            r"engine loop failed",
            "engine loop died",
            fatal=True,
            traceback="after",
        ),
        S(
            "specdec.engine_step_failed",
            FORWARD_ERROR,
            r"engine step failed",
            "engine step failed",
            traceback="after",
            fields=(("phase", "step"),),
        ),
    ),
    markers=("specdec-eval event:", "specdec-eval serve:"),
    owners=("specdec-eval",),
)

# By name: what `--server-log-format` takes.
LOG_FORMATS: MappingProxyType[str, LogFormat] = MappingProxyType(
    {f.name: f for f in (TRTLLM, VLLM, SGLANG, LLAMACPP, SPECDEC)}
)
GENERIC_FORMAT = LogFormat("generic", "any PyTorch engine (only what every one of them prints)", ())
