"""GSM8K and GPQA-Diamond through lm-eval, references and the hypothesis test."""
