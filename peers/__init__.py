"""Engines that are not ours, reached over HTTP: any OpenAI-compatible server (trtllm-serve, vLLM, SGLang,
llama.cpp, `specdec-eval serve`) behind the same `InferenceEngine` Protocol as the local engine, so the run pipeline
never tells them apart. Three packages: `profiles` (what the tool knows about each engine, one module each: its
launch command, log table, metric names and KV gauge, per-response acceptance, request extensions), `server` (a
server process we start or watch: its process, log, metrics, KV usage, stalls), below `client` (talking to the
endpoint: configuration, requests, logprobs, scoring, the engine). Imports workers/ (the engine's contracts) and
specdec_eval/ only; workers/ imports nothing from here."""
