"""The same weights in Hugging Face `transformers`: the peer our engine is checked and benchmarked against.

Built from our own config and checkpoint tensors, so both sides run identical weights whatever the source
(GGUF, safetensors folder or the tiny preset)."""

from __future__ import annotations

import time

import torch

from .checkpoint import Checkpoint


def build_hf_model(checkpoint: Checkpoint, dtype: torch.dtype = torch.float32):
    import transformers

    cfg_dict = checkpoint.config.to_hf_dict()
    arch = cfg_dict["architectures"][0]
    hf_config = transformers.AutoConfig.for_model(**cfg_dict)
    model_cls = getattr(transformers, arch)
    hf_config.tie_word_embeddings = checkpoint.config.tie_word_embeddings
    model = model_cls(hf_config)
    missing, unexpected = model.load_state_dict(dict(checkpoint.tensors()), strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and checkpoint.config.tie_word_embeddings)]
    if missing or unexpected:
        raise RuntimeError(f"HF reference model: missing {missing}, unexpected {unexpected}")
    if checkpoint.config.tie_word_embeddings:
        model.tie_weights()
    model.generation_config.eos_token_id = None  # callers decide when to stop
    return model.to(dtype).eval()


class FirstTokenClock:
    """A `generate` streamer that only notes when the first new tokens arrived (the end of prefill): `generate`
    hands it the prompt first, then each step's tokens."""

    def __init__(self) -> None:
        self.calls = 0
        self.first_token_time: float | None = None

    def put(self, value) -> None:
        self.calls += 1
        if self.calls == 2:
            self.first_token_time = time.perf_counter()

    def end(self) -> None:
        pass


@torch.inference_mode()
def hf_greedy(
    model, prompts: list[list[int]], max_new_tokens: int, pad_token_id: int = 0, clock: FirstTokenClock | None = None
) -> list[list[int]]:
    """Greedy `generate` over left-padded prompts, exactly max_new_tokens each (EOS disabled)."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p)
        mask[i, width - len(p) :] = 1
    out = model.generate(
        input_ids=ids.to(model.device),
        attention_mask=mask.to(model.device),
        max_new_tokens=max_new_tokens,
        do_sample=False,
        pad_token_id=pad_token_id,
        streamer=clock,
    )
    return [row[width:].tolist() for row in out]
