"""specdec-eval: accuracy regression tool for one-model Eagle3 speculative decoding."""

__version__ = "0.1.0"
