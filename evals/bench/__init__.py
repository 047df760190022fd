"""Benchmarks: `specdec-eval bench` (`speed`: ours vs Hugging Face vs spec-dec; `prompts`; `sides`), the
verdict benchmark (`verdict_timing`), interleaved rounds (`rounds`), and this machine's limits with the roofline of each
rate (`hardware`, `roofline`), each engine's memory (`budget`) and the expected duration printed up front
(`estimate`). Imports workers/, tasks/ and pipeline/; nothing imports it but cli/."""
