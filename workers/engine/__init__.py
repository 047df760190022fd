"""The engine loop (nano-vllm's `engine/`): `Engine` (`engine`) drives one `Executor.step()` at a time over the
scheduler's batch (`scheduler`, `request`), with attention metadata built per step (`attn_metadata`), sampling
and stop rules (`sampling`, `stopping`), teacher-forced scoring (`scoring`), the general warmup (`warmup`) and
the named fault points of the step (`faults`)."""
