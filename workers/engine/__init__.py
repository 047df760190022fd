"""The engine loop (nano-vllm's `engine/`): `Engine` (engine.py) drives one `Executor.step()` at a time over the
scheduler's batch (scheduler.py, request.py), with attention metadata built per step (attn_metadata.py), sampling
and stop rules (sampling.py, stopping.py), teacher-forced scoring (scoring.py), the general warmup (warmup.py) and
the named fault points of the step (faults.py)."""
