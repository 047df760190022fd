"""The engine that runs on every rank: model, KV cache, scheduler, executor."""
