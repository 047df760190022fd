"""Every signature table (peers/server/log/tables.py) against the exact lines of
../shared/reference/engine-logs.md, each wrapped in its engine's own line prefix, and lines of our own where the
reference marks a text unconfirmed (said so beside each). Multi-line tracebacks: TensorRT-LLM's seed failure."""

from __future__ import annotations

import pytest
from specdec_eval.peers.server.log import LOG_FORMATS, LogMatcher
from specdec_eval.workers.events import EventLog, event_line

from specdec_eval import event_types

TRT = "[12/05/2026-10:00:02] [TRT-LLM] [W] "
TRT_E = "[12/05/2026-10:00:05] [TRT-LLM] [E] "
VLLM = "(EngineCore_DP0 pid=123) ERROR 08-01 22:26:47 [core.py:98] "
VLLM_API = "(APIServer pid=100) INFO 08-01 22:26:47 [loggers.py:123] "
SGL = "[2026-01-01 12:00:00 TP0] "

# (table, line, event type, fields the event must carry): every string after the prefix is the reference's.
CASES = [
    (
        "trtllm",
        TRT + "OOM during general warmup with 8192 tokens, 0 generation tokens. Skipping.",
        "warmup_oom",
        {"num_tokens": 8192, "num_gen_tokens": 0, "phase": "general"},
    ),
    (
        "trtllm",
        "[12/05/2026-10:00:02] [TRT-LLM] [MPI_Rank 1] [W] OOM during general warmup with 4096 tokens, 8 "
        "generation tokens. Skipping.",
        "warmup_oom",
        {"num_tokens": 4096, "num_gen_tokens": 8, "server_rank": 1},
    ),
    (
        "trtllm",
        TRT + "Skipping general warmup with 8192 tokens (0 generation): not enough KV cache space.",
        "warmup_skipped",
        {"num_tokens": 8192},
    ),
    (
        "trtllm",
        TRT + "Skipping general warmup with 8192 tokens (0 generation): not enough KV cache space on any TP rank.",
        "warmup_skipped",
        {"num_tokens": 8192},
    ),
    (
        "trtllm",
        TRT + "Skipping warmup shape (8192, 0): not enough KV cache space.",
        "warmup_skipped",
        {"shape": "8192, 0"},
    ),
    (
        "trtllm",
        TRT + "Skipping CUDA graph warmup (generation) for batch size=64, draft_len=3: not enough KV cache space.",
        "warmup_skipped",
        {"label": "generation", "batch_size": 64, "draft_len": 3},
    ),
    (
        "trtllm",
        "RuntimeError: Warmup batch creation failed on TP rank(s) [1] but succeeded on others. This would "
        "cause a collective deadlock. Aborting.",
        "engine_dead",
        {"ranks": "[1]", "fatal": True},
    ),
    (
        "trtllm",
        TRT + "Spec-dec worker forward failed between prepare_for_spec_dec and restore_from_spec_dec; "
        "restoring attn metadata state.",
        "spec_state_restored",
        {},
    ),
    (
        "trtllm",
        TRT_E + "Encountered an error in forward function: CUDA error: an illegal memory access",
        "forward_error",
        {"error": "CUDA error: an illegal memory access"},
    ),
    (
        "trtllm",
        TRT_E + "Encountered an error in sampling: probabilities contain NaN",
        "forward_error",
        {"error": "probabilities contain NaN", "phase": "sampling"},
    ),
    (
        "trtllm",
        TRT_E + "Error in event loop: Sampling failed",
        "engine_dead",
        {"error": "Sampling failed", "fatal": True, "message": "executor loop died: Sampling failed"},
    ),
    ("vllm", VLLM + "EngineCore failed to start.", "engine_dead", {"fatal": True}),
    ("vllm", VLLM + "EngineCore encountered a fatal error.", "engine_dead", {"fatal": True}),
    (
        "vllm",
        VLLM_API + "Engine core initialization failed. See root cause above. Failed core proc(s): {}",
        "engine_dead",
        {},
    ),
    (
        "vllm",
        VLLM_API + "Engine core process EngineCore_DP0 died unexpectedly.",
        "engine_dead",
        {"process": "EngineCore_DP0"},
    ),
    (
        "vllm",
        VLLM + "Worker proc VllmWorker-0 died unexpectedly (exit code: -9), shutting down executor.",
        "engine_dead",
        {"process": "VllmWorker-0", "exit_code": -9},
    ),
    (
        "vllm",
        VLLM + "CUDA out of memory occurred when warming up sampler with 256 dummy requests. Please try "
        "lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine.",
        "cuda_oom",
        {"num_reqs": 256, "phase": "warmup"},
    ),
    (
        "vllm",
        VLLM + "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
        "initializing the engine.",
        "cuda_oom",
        {"phase": "kv sizing"},
    ),
    (
        "vllm",
        VLLM + "Error in memory profiling. Initial free memory 10.0 GiB, current free memory 12.0 GiB.",
        "cuda_oom",
        {"phase": "profiling"},
    ),
    (
        "vllm",
        VLLM + "To serve at least one request with the model's max seq len (32768), (4.00 GiB KV cache is "
        "needed, which is larger than the available KV cache memory (2.00 GiB).",
        "kv_exhausted",
        {"max_seq_len": 32768},
    ),
    ("vllm", VLLM + "Cannot auto-fit max_model_len: not enough KV cache memory.", "kv_exhausted", {}),
    (
        "vllm",
        VLLM_API + "Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, "
        "Running: 3 reqs, Waiting: 1 reqs, Preemptions: 2, GPU KV cache usage: 99.1%, Prefix cache hit rate: 0.0%",
        "kv_exhausted",
        {"preemptions": 2},
    ),
    (
        "vllm",
        "WARNING 08-01 22:26:47 [scheduler.py:1000] Sequence group cmpl-7 is preempted by "
        "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space.",
        "kv_exhausted",
        {"request": "cmpl-7", "mode": "RECOMPUTE"},
    ),
    (
        "sglang",
        SGL + "KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_tokens_gained: 512",
        "kv_exhausted",
        {"retracted": 3, "server_rank": 0},
    ),
    (
        "sglang",
        SGL + "Out of memory even after retracting all other requests in the decode batch. Aborting the last request.",
        "request_failed",
        {},
    ),
    ("sglang", SGL + "Prefill out of memory. Try to lower your batch size.", "kv_exhausted", {"phase": "prefill"}),
    ("sglang", SGL + "Decode out of memory. Try to lower your batch size.", "kv_exhausted", {"phase": "decode"}),
    (
        "sglang",
        SGL + "Not enough memory. Please try to increase --mem-fraction-static.",
        "cuda_oom",
        {"phase": "startup"},
    ),
    (
        "sglang",
        SGL + "Capture cuda graph failed: CUDA error: out of memory",
        "cuda_graph_failed",
        {"error": "CUDA error: out of memory"},
    ),
    ("sglang", SGL + "Scheduler hit an exception: ValueError: boom", "engine_dead", {"fatal": True}),
    (
        "llamacpp",
        "decode: failed to find free space in the KV cache, retrying with smaller batch size, n_batch = 256",
        "kv_exhausted",
        {},
    ),
    (
        "llamacpp",
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 512.00 MiB on device 0: cudaMalloc failed: "
        "out of memory",
        "cuda_oom",
        {},
    ),
    # Any engine (the generic signatures every table ends with)
    (
        "vllm",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 146.00 MiB. GPU 0 has a total capacity "
        "of 79.15 GiB",
        "cuda_oom",
        {"requested": "146.00 MiB"},
    ),
    ("sglang", "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB", "cuda_oom", {"requested": "20.00 MiB"}),
    (
        "trtllm",
        "[rank0]:[E1205 10:00:00.000000000 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
        "600081 milliseconds before timing out.",
        "nccl_timeout",
        {"ran_ms": 600081, "fatal": True},
    ),
    (
        "specdec-eval",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "engine_dead",
        {"fatal": True},
    ),
]

# Lines of our own where the reference gives no exact text (marked confirmed=False in the table).
UNCONFIRMED = [
    ("sglang", SGL + "Memory leak detected! available_size=100, max_total_num_tokens=120", "kv_block_leak"),
    ("llamacpp", "send_error: task id = 3, error: Context size has been exceeded.", "request_failed"),
]


def _one(table: str, line: str, number: int = 7) -> dict | None:
    return LogMatcher(LOG_FORMATS[table]).feed(line, number)


@pytest.mark.parametrize("table, line, type_, fields", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_each_reference_line_is_its_event(table, line, type_, fields):
    event = _one(table, line)
    assert event is not None, line
    assert event["type"] == type_ and type_ in event_types.EVENT_TYPES
    assert {k: event[k] for k in fields} == fields
    # it keeps its raw line and line number, the table and signature that read it, and a message
    assert event["raw"] == line and event["line"] == 7 and event["log_format"] == table
    assert event["signature"] and event["message"] and event["source"] == "server_log"


@pytest.mark.parametrize("table, line, type_", UNCONFIRMED, ids=[c[0] for c in UNCONFIRMED])
def test_unconfirmed_wordings_are_lines_of_our_own(table, line, type_):
    event = _one(table, line)
    assert event is not None and event["type"] == type_
    (sig,) = [s for s in LOG_FORMATS[table].signatures if s.name == event["signature"]]
    assert not sig.confirmed  # the table says the wording is ours


@pytest.mark.parametrize(
    "table, line",
    [
        (
            "vllm",
            VLLM_API + "Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 "
            "tokens/s, Running: 3 reqs, Waiting: 0 reqs, Preemptions: 0, GPU KV cache usage: 9.1%",
        ),  # no preemption
        (
            "vllm",
            VLLM_API + "SpecDecoding metrics: Mean acceptance length: 2.31, Accepted: 10 tokens, Drafted: 30 tokens",
        ),
        (
            "sglang",
            SGL + "Decode batch, #running-req: 4, #token: 900, token usage: 0.05, accept len: 2.31, "
            "cuda graph: True, gen throughput (token/s): 100.0, #queue-req: 0",
        ),
        ("llamacpp", "draft acceptance rate = 0.57000 (   57 accepted /   100 generated)"),
        ("trtllm", "[12/05/2026-10:00:01] [TRT-LLM] [I] Run warmup with 8192 tokens, include 0 generation tokens"),
        # the saved-tensors assertion counts only inside a traceback
        ("trtllm", "see: assert len(self._saved_tensors) == 0"),
    ],
)
def test_ordinary_lines_are_no_events(table, line):
    assert _one(table, line) is None


SEED_LOG = """\
[12/05/2026-10:00:01] [TRT-LLM] [I] Run warmup with 8192 tokens, include 0 generation tokens
[12/05/2026-10:00:02] [TRT-LLM] [W] OOM during general warmup with 8192 tokens, 0 generation tokens. Skipping.
Traceback (most recent call last):
  File "/usr/lib/python3/dist-packages/tensorrt_llm/_torch/pyexecutor/py_executor.py", line 1234, in _forward_step
    outputs = self.model_engine.forward(scheduled_requests)
  File "/usr/lib/python3/dist-packages/tensorrt_llm/_torch/attention_backend/interface.py", line 456, in prepare
    assert len(self._saved_tensors) == 0
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
AssertionError
[12/05/2026-10:00:05] [TRT-LLM] [E] Encountered an error in forward function: 
[12/05/2026-10:00:05] [TRT-LLM] [E] Error in event loop: Sampling failed
Traceback (most recent call last):
  File "/usr/lib/python3/dist-packages/tensorrt_llm/_torch/pyexecutor/py_executor.py", line 999, in _event_loop
    assert sample_state is not None, "Sampling failed"
AssertionError: Sampling failed
"""  # noqa: W291 - the forward-error line ends with the colon and a space, as TensorRT-LLM prints it


def _feed(table: str, text: str) -> list[dict]:
    matcher = LogMatcher(LOG_FORMATS[table])
    found = [matcher.feed(line, n) for n, line in enumerate(text.splitlines(), 1)]
    return [e for e in found if e is not None]  # completed in place by later lines


def test_the_seed_failure_across_tracebacks():
    """The saved-tensors assertion is read from its traceback's source line; the empty forward error takes that
    traceback (printed before it) as its cause; the dead event loop takes the traceback printed after it."""
    oom, leak, forward, dead = _feed("trtllm", SEED_LOG)
    assert (oom["type"], oom["line"]) == ("warmup_oom", 2)
    assert (leak["type"], leak["line"], leak["exception"]) == ("spec_state_leak", 7, "AssertionError")
    assert leak["raw"] == "    assert len(self._saved_tensors) == 0"
    assert (forward["type"], forward["line"], forward["error"]) == ("forward_error", 10, "AssertionError")
    assert forward["cause"] == "AssertionError at `assert len(self._saved_tensors) == 0` (log line 7)"
    assert forward["cause_line"] == 9 and forward["message"] == "forward failed: AssertionError"
    assert (dead["type"], dead["line"], dead["fatal"]) == ("engine_dead", 11, True)
    assert dead["message"] == "executor loop died: Sampling failed"
    assert dead["cause"].startswith("AssertionError: Sampling failed at `assert sample_state is not None")


def test_a_logger_exception_traceback_after_its_line_and_vllm_prefixes():
    """vLLM repeats its prefix before every line of a traceback (logger.exception); the traceback after
    "EngineCore encountered a fatal error." is its cause."""
    log = "\n".join(
        [
            VLLM + "EngineCore encountered a fatal error.",
            VLLM + "Traceback (most recent call last):",
            VLLM + '  File "/vllm/v1/engine/core.py", line 701, in run_engine_core',
            VLLM + "    engine_core.run_busy_loop()",
            VLLM + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
        ]
    )
    dead, oom = _feed("vllm", log)
    assert dead["type"] == "engine_dead" and dead["cause_line"] == 5
    assert dead["cause"] == (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. at "
        "`engine_core.run_busy_loop()` (log line 4)"
    )
    assert oom["type"] == "cuda_oom" and oom["line"] == 5


def test_a_traceback_far_from_an_error_line_is_not_its_cause():
    log = "\n".join(
        [
            "Traceback (most recent call last):",
            '  File "x.py", line 1, in f',
            "    boom()",
            "ValueError: x",
            "a",
            "b",
            "c",
            "d",
            TRT_E + "Encountered an error in forward function: ",
        ]
    )
    (forward,) = _feed("trtllm", log)
    assert "cause" not in forward and forward["error"] == ""


def test_our_event_lines_are_read_back_whole():
    """`specdec-eval serve` writes each engine event as one line (workers/events.py); our table reads it back: the
    same type and fields, the server's own ts and rank kept apart."""
    log = EventLog(rank=2)
    original = log.emit("spec_state_leak", fields=["seq_lens", "kv_lens"], detected_at="step 4 start", worker="W")
    line = "INFO:     " + event_line(original)
    event = _one("specdec-eval", line)
    assert event["type"] == "spec_state_leak" and event["fields"] == ["seq_lens", "kv_lens"]
    assert event["server_rank"] == 2 and event["server_ts"] == original["ts"] and event["rank"] == 0
    assert event["message"] == "spec_state_leak: fields=['seq_lens', 'kv_lens']"
    assert _one("specdec-eval", "specdec-eval event: {not json") is None
    # another thread's output glued after the object (seen in a real serve log) does not lose the event
    glued = _one("specdec-eval", event_line(original) + "INFO:     Application startup complete.")
    assert glued["type"] == "spec_state_leak" and glued["fields"] == ["seq_lens", "kv_lens"]


def test_every_table_names_only_known_event_types_and_compiles():
    for table in LOG_FORMATS.values():
        for sig in table.signatures:
            assert sig.type is None or sig.type in event_types.EVENT_TYPES, sig.name
            assert sig.regex.pattern


# vLLM 0.32.0 (CPU build) dying on a sampled speculative request, as its log printed it (frames trimmed).
W32 = "(Worker pid=8925) ERROR 12-06 23:18:06 [multiproc_executor.py:1063] "
E32 = "(EngineCore pid=8753) ERROR 12-06 23:18:06 [core.py:1512] "
VLLM_032_DEATH = "\n".join(
    [
        W32 + "WorkerProc hit an exception.",
        W32 + "Traceback (most recent call last):",
        W32 + '  File "/v/vllm/v1/sample/ops/topk_topp_sampler.py", line 290, in apply_top_k_top_p',
        W32 + "    top_k_mask = logits_sort.gather(1, top_k_mask.unsqueeze(dim=1))",
        W32 + "RuntimeError: index 49152 is out of bounds for dimension 1 with size 49152",
        E32 + "EngineCore encountered a fatal error.",
        E32 + "Traceback (most recent call last):",
        E32 + '  File "/v/vllm/v1/executor/multiproc_executor.py", line 444, in get_response',
        E32 + "    raise RuntimeError(",
        E32 + "RuntimeError: Worker failed with error 'index 49152 is out of bounds for dimension 1 with size 49152', "
        "please check the stack trace above for the root cause",
        "(APIServer pid=7601) ERROR 12-06 23:18:06 [async_llm.py:906] AsyncLLM output_handler failed.",
    ]
)


def test_a_dead_vllm_engine_core_is_named_by_its_exception_line():
    """The fatal line says only that the engine core died; the event's message names what it died of."""
    (dead,) = _feed("vllm", VLLM_032_DEATH)
    assert (dead["type"], dead["fatal"], dead["line"]) == ("engine_dead", True, 6)
    assert dead["message"] == (
        "engine core hit a fatal error: RuntimeError: Worker failed with error 'index 49152 "
        "is out of bounds for dimension 1 with size 49152', please check the stack trace "
        "above for the root cause"
    )
