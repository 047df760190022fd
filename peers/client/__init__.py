"""Talking to an OpenAI-compatible endpoint: what a run is told about it (config, options), connecting (probe), one
request through lm-eval's backend (requests), the answer's logprobs and token checks, teacher-forced scoring over
`echo`, and the engine that puts them behind the engine Protocol. Uses `server` below it for what the run watches."""
