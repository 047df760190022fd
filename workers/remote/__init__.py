"""Engines that are not ours, reached over HTTP: any OpenAI-compatible server (trtllm-serve, vLLM, SGLang,
llama.cpp, `specdec-eval serve`) behind the same `InferenceEngine` Protocol as the local engine (workers/interface.py),
so the run pipeline never tells them apart. Its configuration (endpoint_config.py), one request through lm-eval's
own API backend (endpoint_requests.py), and servers' acceptance metrics (server_metrics.py, server_metric_formats.py).
Imports workers/ only, like the rest of workers/."""
