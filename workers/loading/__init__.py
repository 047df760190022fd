"""Loading a model: checkpoints from a Hugging Face folder, a GGUF file or a named preset (checkpoint.py, hf_reader.py,
gguf_reader.py, presets.py), their architecture (model_config.py), tokenizers (tokenizer.py), and the Hugging Face
reference model the tests compare against (hf_reference.py)."""
