"""Names of the engine's event types (docs/architecture.md, "Events"), shared by the engine (workers/) and the run store
(results/), which must not import each other. A leaf module: it imports nothing."""

WARMUP_OOM = "warmup_oom"  # a warmup shape ran out of memory and was skipped
SPEC_STATE_RESTORED = "spec_state_restored"  # the cleanup path restored spec-dec state after an exception
SPEC_STATE_LEAK = "spec_state_leak"  # saved spec-dec state was found unrestored
FORWARD_ERROR = "forward_error"  # a forward raised
REQUEST_FAILED = "request_failed"  # a request could not be completed
REQUEST_RETRIED = "request_retried"  # a request was recomputed after its batch failed
FAULT_INJECTED = "fault_injected"  # a configured fault fired
# Resource invariants at drain, and what other engines report in their logs (peers/server/log/)
KV_BLOCK_LEAK = "kv_block_leak"  # our engine drained, yet KV blocks are still held by no request
KV_LEAK = "kv_leak"  # a server's KV-usage metric did not return to its idle value after the run drained
ENGINE_DEAD = "engine_dead"  # a server's engine stopped (executor loop died, engine core died): it cannot answer
SERVER_STALLED = "server_stalled"  # a server stopped answering during the run; its unanswered documents failed
SERVER_EXITED = "server_exited"  # the server the run started exited during the run: what answered was not it
NCCL_TIMEOUT = "nccl_timeout"  # a collective timed out (NCCL watchdog): the ranks no longer agree
CUDA_OOM = "cuda_oom"  # a device allocation failed outside a tolerated warmup
KV_EXHAUSTED = "kv_exhausted"  # the KV pool ran full: requests preempted, retracted or retried smaller
CUDA_GRAPH_FAILED = "cuda_graph_failed"  # CUDA-graph capture failed
WARMUP_SKIPPED = "warmup_skipped"  # a warmup shape was skipped for lack of KV-cache space

EVENT_TYPES = (
    WARMUP_OOM,
    SPEC_STATE_RESTORED,
    SPEC_STATE_LEAK,
    FORWARD_ERROR,
    REQUEST_FAILED,
    REQUEST_RETRIED,
    FAULT_INJECTED,
    KV_BLOCK_LEAK,
    KV_LEAK,
    ENGINE_DEAD,
    SERVER_STALLED,
    SERVER_EXITED,
    NCCL_TIMEOUT,
    CUDA_OOM,
    KV_EXHAUSTED,
    CUDA_GRAPH_FAILED,
    WARMUP_SKIPPED,
)

# Events that fail a run whatever its accuracy: a leak means outputs after it cannot be trusted, and a failed
# request is never scored as a wrong answer. A dead engine, a stalled server or a timed-out collective leave
# documents unanswered (or answered by ranks that no longer agree); leaked KV blocks shrink the pool for every later
# request until the server can no longer serve. A server the run started that exited during the run answered none of
# what came after: whatever answered its port did. Not failing on their own: a tolerated warmup OOM or skip, a
# restored spec-dec state, a forward error whose requests were retried, a device OOM the engine survived, a full KV
# pool (preemption costs time, not correctness) and a failed CUDA-graph capture: what they break shows up as
# failed requests or a dead engine, which fail the run.
FAILING_EVENTS = (
    SPEC_STATE_LEAK,
    REQUEST_FAILED,
    KV_BLOCK_LEAK,
    KV_LEAK,
    ENGINE_DEAD,
    SERVER_STALLED,
    SERVER_EXITED,
    NCCL_TIMEOUT,
)
