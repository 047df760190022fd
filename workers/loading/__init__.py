"""Loading a model: checkpoints from a Hugging Face folder, a GGUF file or a named preset (`checkpoint`, `hf_reader`,
`gguf_reader`, `presets`), their architecture (`model_config`), tokenizers (`tokenizer`), and the Hugging Face
reference model the tests compare against (`hf_reference`)."""
