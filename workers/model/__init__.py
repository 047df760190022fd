"""The target model: a Llama-family decoder (causal_lm.py) built from tensor-parallel layers (layers/), over one TP
group (parallel.py)."""
