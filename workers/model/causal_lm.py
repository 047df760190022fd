"""A Llama-family decoder (Llama 2/3, Mistral, Qwen2/3, SmolLM2) that reads and writes a paged KV cache.

Parameter names follow Hugging Face, so checkpoints load without a rename table. The forward takes flattened
tokens of a whole mixed batch plus the step's `AttentionMetadata`; it never sees requests or the scheduler.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import nn

from ...errors import UserError
from ..loading.model_config import ModelConfig
from .attn_metadata import AttentionMetadata
from .layers.attention import Attention
from .layers.linear import VocabParallelLMHead
from .layers.mlp import SwiGLU
from .layers.norm import RMSNorm
from .layers.paged_kv import PagedKV
from .layers.rotary import RotaryEmbedding
from .parallel import TPGroup


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, tp: TPGroup) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg, tp)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = SwiGLU(cfg.hidden_size, cfg.intermediate_size, tp)

    def forward(self, h, cos_sin, meta, kv_layer):
        h = h + self.self_attn(self.input_layernorm(h), cos_sin, meta, kv_layer)
        return h + self.mlp(self.post_attention_layernorm(h))


class DecoderBody(nn.Module):
    """`model.*` in Hugging Face naming: embeddings, layers, final norm."""

    def __init__(self, cfg: ModelConfig, tp: TPGroup) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg, tp) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class CausalLM(nn.Module):
    def __init__(self, cfg: ModelConfig, tp: TPGroup | None = None) -> None:
        super().__init__()
        tp = tp or TPGroup()
        cfg.check_tp_size(tp.size)
        self.config = cfg
        self.tp = tp
        self.model = DecoderBody(cfg, tp)
        self.rotary = RotaryEmbedding(cfg.rope, cfg.head_dim)
        self.lm_head = VocabParallelLMHead(cfg.hidden_size, cfg.vocab_size, tp)

    def forward(
        self,
        input_ids: torch.Tensor,
        meta: AttentionMetadata,
        kv: PagedKV,
        capture_layers: tuple[int, ...] = (),
        halfway: Callable[[], None] | None = None,
        on_capture: Callable[[torch.Tensor], None] | None = None,
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Run the decoder over the flattened batch.

        kv: the KV pool (layer i uses kv.layer(i)) and its decode copy.
        capture_layers: indices i whose *input* residual stream is returned (Eagle3's auxiliary features;
        equal to Hugging Face `hidden_states[i]`).
        halfway: called before the middle layer (where a fault point aborts a forward with half its KV written).
        on_capture: called with each captured residual stream before its layer runs (the `spec_alters_target`
        fault point: what it does to the tensor in place, the rest of the forward sees).
        Returns the final-normed hidden states [T, hidden] and the captured states in the order asked.
        """
        h = self.model.embed_tokens(input_ids)
        cos_sin = self.rotary.cos_sin(meta.positions, h.dtype)
        captured: dict[int, torch.Tensor] = {}
        middle = len(self.model.layers) // 2
        for i, layer in enumerate(self.model.layers):
            if i == middle and halfway is not None:
                halfway()
            if i in capture_layers:
                if on_capture is not None:
                    on_capture(h)
                captured[i] = h
            h = layer(h, cos_sin, meta, kv.layer(i))
        return self.model.norm(h), [captured[i] for i in capture_layers]

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Full-vocabulary logits (gathered across TP ranks) in float32."""
        return self.lm_head(hidden).float()

    def load_weights(self, tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy checkpoint tensors (Hugging Face names, full unsharded shapes) into this rank's parameters."""
        params = dict(self.named_parameters())
        # Our lm_head wraps a column-parallel linear; checkpoints call it `lm_head.weight`.
        params["lm_head.weight"] = params.pop("lm_head.proj.weight")
        loaded: set[str] = set()
        for name, tensor in tensors:
            if name == "model.embed_tokens.weight" and self.config.tie_word_embeddings:
                _load(params["lm_head.weight"], tensor)
                loaded.add("lm_head.weight")
            if name not in params:
                if name.endswith("rotary_emb.inv_freq"):
                    continue
                raise UserError(f"checkpoint tensor {name!r} has no place in a {self.config.model_type} model")
            _load(params[name], tensor)
            loaded.add(name)
        missing = sorted(set(params) - loaded)
        if missing:
            shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            raise UserError(f"checkpoint lacks tensors: {shown}")


def _load(param: nn.Parameter, full: torch.Tensor) -> None:
    loader = getattr(param, "weight_loader", None)
    with torch.no_grad():
        if loader is not None:
            loader(param, full.to(param.dtype))
        else:
            if tuple(param.shape) != tuple(full.shape):
                raise UserError(f"checkpoint tensor shape {tuple(full.shape)} != parameter {tuple(param.shape)}")
            param.data.copy_(full)
