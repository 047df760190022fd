"""Benchmarks: `specdec-eval bench` (speed.py: ours vs Hugging Face vs spec-dec; prompts.py; sides.py), the
verdict benchmark (verdict.py), interleaved rounds (rounds.py), and this machine's limits with the roofline of each
rate (hardware.py, roofline.py), each engine's memory (budget.py) and the expected duration printed up front
(estimate.py). Imports workers/, tasks/ and pipeline/; nothing imports it but cli/."""
