"""The target model: a Llama-family decoder (`causal_lm`) built from tensor-parallel layers (layers/), over one TP
group (`parallel`)."""
