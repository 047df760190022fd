"""The lossless gate: a spec-dec run against its baseline, token for token or in distribution (sampled.py)."""
