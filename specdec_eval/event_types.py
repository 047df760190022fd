"""Names of the engine's event types (DESIGN.md, "Events"), shared by the engine (workers/) and the run store
(results/), which must not import each other. A leaf module: it imports nothing."""

WARMUP_OOM = "warmup_oom"  # a warmup shape ran out of memory and was skipped
SPEC_STATE_RESTORED = "spec_state_restored"  # the cleanup path restored spec-dec state after an exception
SPEC_STATE_LEAK = "spec_state_leak"  # saved spec-dec state was found unrestored
FORWARD_ERROR = "forward_error"  # a forward raised
REQUEST_FAILED = "request_failed"  # a request could not be completed
REQUEST_RETRIED = "request_retried"  # a request was recomputed after its batch failed
FAULT_INJECTED = "fault_injected"  # a configured fault fired

EVENT_TYPES = (
    WARMUP_OOM,
    SPEC_STATE_RESTORED,
    SPEC_STATE_LEAK,
    FORWARD_ERROR,
    REQUEST_FAILED,
    REQUEST_RETRIED,
    FAULT_INJECTED,
)

# Events that fail a run whatever its accuracy: a leak means outputs after it cannot be trusted, and a failed
# request is never scored as a wrong answer.
FAILING_EVENTS = (SPEC_STATE_LEAK, REQUEST_FAILED)
