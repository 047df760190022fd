"""The Eagle3 draft head: `fc` fuses three captured target layers (3·H_t -> H); one decoder layer whose
attention reads concat(embedding, hidden) (2·H); a final norm; an lm_head over a reduced draft vocabulary whose
ids map to target ids through `d2t` (target = draft + d2t[draft]). Layout and pitfalls: docs/concepts/eagle3.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch import nn

from ...errors import UserError
from ..loading.model_config import ModelConfig
from ..model.attn_metadata import AttentionMetadata
from ..model.layers.attention import Attention
from ..model.layers.linear import linear
from ..model.layers.mlp import SwiGLU
from ..model.layers.norm import RMSNorm
from ..model.layers.paged_kv import LayerKV
from ..model.layers.rotary import RotaryEmbedding
from ..model.parallel import TPGroup


def default_capture_layers(num_layers: int) -> tuple[int, int, int]:
    """Input-of-layer ids (2, L//2, L-3), the EAGLE / vLLM convention (= HF hidden_states indices)."""
    if num_layers <= 5:
        raise UserError(f"Eagle3 needs a target with more than 5 layers, this one has {num_layers}")
    return (2, num_layers // 2, num_layers - 3)


@dataclass(frozen=True)
class Eagle3HeadConfig:
    layer: ModelConfig  # shape of the draft decoder layer (vocab_size = target vocabulary)
    target_hidden_size: int
    draft_vocab_size: int
    capture_layers: tuple[int, int, int]
    norm_before_residual: bool = False

    @classmethod
    def for_target(cls, target: ModelConfig, capture_layers: tuple[int, ...] | None = None) -> Eagle3HeadConfig:
        """A head shaped like the target (what a freshly initialised or self-trained head uses)."""
        return cls(
            layer=replace(target, num_hidden_layers=1, tie_word_embeddings=False, name="eagle3-head"),
            target_hidden_size=target.hidden_size,
            draft_vocab_size=target.vocab_size,
            capture_layers=tuple(capture_layers or default_capture_layers(target.num_hidden_layers)),
        )

    @classmethod
    def from_json(cls, cfg: dict, target: ModelConfig, capture_layers: tuple[int, ...] | None) -> Eagle3HeadConfig:
        # speculators nests the layer config; EAGLE/SpecForge keep it flat.
        layer_dict = dict(cfg.get("transformer_layer_config") or cfg)
        layer_dict.setdefault("model_type", "llama")
        layer_dict.setdefault("vocab_size", target.vocab_size)
        layer_dict["num_hidden_layers"] = 1
        # Published heads usually carry no rope_theta: they were trained with the LlamaConfig default 10000,
        # not the target's base. Never inherit the target's rope.
        layer_dict.setdefault("rope_theta", 10000.0)
        layer = ModelConfig.from_hf_dict(layer_dict, name="eagle3-head")
        if layer.vocab_size != target.vocab_size:
            raise UserError(f"draft head vocab {layer.vocab_size} != target vocab {target.vocab_size}")
        aux = (cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids") or cfg.get(
            "eagle_aux_hidden_state_layer_ids"
        )
        layers = capture_layers or (tuple(aux) if aux else default_capture_layers(target.num_hidden_layers))
        return cls(
            layer=layer,
            target_hidden_size=int(cfg.get("target_hidden_size") or target.hidden_size),
            draft_vocab_size=int(cfg.get("draft_vocab_size") or target.vocab_size),
            capture_layers=tuple(layers),
            norm_before_residual=bool(cfg.get("norm_before_residual", False)),
        )

    def check_against(self, target: ModelConfig) -> None:
        bad = [i for i in self.capture_layers if not 0 <= i < target.num_hidden_layers]
        if bad:
            raise UserError(f"capture layers {bad} out of range for a {target.num_hidden_layers}-layer target")
        if self.target_hidden_size != target.hidden_size:
            raise UserError(
                f"draft head expects target hidden {self.target_hidden_size}, target has {target.hidden_size}"
            )
        if (self.layer.num_key_value_heads, self.layer.head_dim) != (target.num_key_value_heads, target.head_dim):
            raise UserError(
                "draft head KV layout (heads x dim "
                f"{self.layer.num_key_value_heads}x{self.layer.head_dim}) differs from the target's "
                f"({target.num_key_value_heads}x{target.head_dim}); it cannot share the target's KV pool"
            )


class Eagle3DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, tp: TPGroup) -> None:
        super().__init__()
        h = cfg.hidden_size
        self.input_layernorm = RMSNorm(h, cfg.rms_norm_eps)
        self.hidden_norm = RMSNorm(h, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg, tp, in_features=2 * h)
        self.post_attention_layernorm = RMSNorm(h, cfg.rms_norm_eps)
        self.mlp = SwiGLU(h, cfg.intermediate_size, tp)


class Eagle3DraftModel(nn.Module):
    def __init__(self, hc: Eagle3HeadConfig, tp: TPGroup | None = None) -> None:
        super().__init__()
        tp = tp or TPGroup()
        h = hc.layer.hidden_size
        self.config = hc
        self.fc = nn.Linear(3 * hc.target_hidden_size, h, bias=False)  # replicated: small, and runs once a step
        self.midlayer = Eagle3DecoderLayer(hc.layer, tp)
        self.norm = RMSNorm(h, hc.layer.rms_norm_eps)
        self.lm_head = nn.Linear(h, hc.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(hc.draft_vocab_size, dtype=torch.int64))
        self.rotary = RotaryEmbedding(hc.layer.rope, hc.layer.head_dim)

    def fuse(self, captured: list[torch.Tensor]) -> torch.Tensor:
        """Target features for the first draft pass: fc(low | mid | high)."""
        return linear(torch.cat(captured, dim=-1), self.fc.weight)

    def forward(
        self,
        embeds: torch.Tensor,
        hidden: torch.Tensor,
        meta: AttentionMetadata,
        kv: LayerKV,
    ) -> torch.Tensor:
        """embeds: target embeddings of the tokens; hidden: fused target features (first pass) or the previous
        draft output. Returns the pre-norm output, which the next draft step consumes."""
        layer = self.midlayer
        normed_h = layer.hidden_norm(hidden)
        x = torch.cat([layer.input_layernorm(embeds), normed_h], dim=-1)
        residual = normed_h if self.config.norm_before_residual else hidden
        cos_sin = self.rotary.cos_sin(meta.positions, hidden.dtype)
        h = residual + layer.self_attn(x, cos_sin, meta, kv)
        return h + layer.mlp(layer.post_attention_layernorm(h))

    def propose(self, hidden: torch.Tensor) -> torch.Tensor:
        """Greedy draft token (as a target id) for each row of pre-norm hidden states."""
        return self.to_target(torch.argmax(self.draft_logits(hidden), dim=-1))

    def draft_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The head's logits over its own vocabulary (float32) for each row of pre-norm hidden states."""
        return linear(self.norm(hidden), self.lm_head.weight).float()

    def to_target(self, draft_ids: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary ids as target ids."""
        return draft_ids + self.d2t[draft_ids]

    # --- weights ----------------------------------------------------------------------------------------

    def init_random(self, seed: int, std: float = 0.1) -> None:
        """A seeded random head: the correctness canary (greedy output must still equal the target's)."""
        g = torch.Generator().manual_seed(seed)
        full = random_head_tensors(self.config, g, std)
        self.load_tensors(full.items())

    def load_tensors(self, tensors) -> None:
        params = dict(self.named_parameters())
        seen: set[str] = set()
        for name, tensor in tensors:
            name = head_tensor_name(name)
            if name == "d2t":
                self.d2t.copy_(tensor.to(torch.int64))
                continue
            if name is None:
                continue
            if name not in params:
                raise UserError(f"draft checkpoint tensor {name!r} is not part of an Eagle3 head")
            param = params[name]
            loader = getattr(param, "weight_loader", None)
            with torch.no_grad():
                if loader is not None:
                    loader(param, tensor.to(param.dtype))
                elif tuple(param.shape) != tuple(tensor.shape):
                    raise UserError(f"draft tensor {name}: shape {tuple(tensor.shape)} != {tuple(param.shape)}")
                else:
                    param.copy_(tensor.to(param.dtype))
            seen.add(name)
        missing = sorted(set(params) - seen)
        if missing:
            raise UserError(f"draft checkpoint lacks tensors: {', '.join(missing[:5])}")


def head_tensor_name(name: str) -> str | None:
    """A checkpoint tensor's name as our head names it (EAGLE / SpecForge / speculators layouts), or None for
    tensors the head does not load (the training-only t2d mask; the embedding, which is the target's)."""
    name = name.removeprefix("model.")
    name = name.replace("layers.0.", "midlayer.") if name.startswith("layers.0.") else name
    if name in ("t2d", "embed_tokens.weight") or name.endswith("rotary_emb.inv_freq"):
        return None
    return name


def random_head_tensors(hc: Eagle3HeadConfig, g: torch.Generator, std: float = 0.1) -> dict[str, torch.Tensor]:
    c = hc.layer
    h, q, kv, i = c.hidden_size, c.q_size, c.kv_size, c.intermediate_size

    def w(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * std

    def norm() -> torch.Tensor:
        return 1.0 + torch.randn(h, generator=g) * 0.05

    tensors = {
        "fc.weight": w(h, 3 * hc.target_hidden_size),
        "midlayer.input_layernorm.weight": norm(),
        "midlayer.hidden_norm.weight": norm(),
        "midlayer.self_attn.q_proj.weight": w(q, 2 * h),
        "midlayer.self_attn.k_proj.weight": w(kv, 2 * h),
        "midlayer.self_attn.v_proj.weight": w(kv, 2 * h),
        "midlayer.self_attn.o_proj.weight": w(h, q),
        "midlayer.post_attention_layernorm.weight": norm(),
        "midlayer.mlp.gate_proj.weight": w(i, h),
        "midlayer.mlp.up_proj.weight": w(i, h),
        "midlayer.mlp.down_proj.weight": w(h, i),
        "norm.weight": norm(),
        "lm_head.weight": w(hc.draft_vocab_size, h),
    }
    if c.attention_bias:
        for name, size in (("q_proj", q), ("k_proj", kv), ("v_proj", kv)):
            tensors[f"midlayer.self_attn.{name}.bias"] = w(size)
    if c.qk_norm:
        tensors["midlayer.self_attn.q_norm.weight"] = 1.0 + torch.randn(c.head_dim, generator=g) * 0.05
        tensors["midlayer.self_attn.k_norm.weight"] = 1.0 + torch.randn(c.head_dim, generator=g) * 0.05
    return tensors


def read_head_folder(folder: Path) -> tuple[dict, dict[str, torch.Tensor]]:
    """config.json plus model.safetensors, or pytorch_model.bin through torch.load(weights_only=True): the
    official EAGLE-3 heads ship only the .bin; weights_only refuses arbitrary pickled objects."""
    if not folder.is_dir():
        raise UserError(f"draft model folder not found: {folder}")
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        raise UserError(f"draft model folder {folder} has no config.json")
    try:
        cfg = json.loads(cfg_path.read_text())
    except json.JSONDecodeError as e:
        raise UserError(f"{cfg_path}: not valid JSON ({e.msg})") from None
    st, binf = folder / "model.safetensors", folder / "pytorch_model.bin"
    if st.is_file():
        from safetensors.torch import load_file

        return cfg, load_file(str(st))
    if binf.is_file():
        try:
            return cfg, torch.load(binf, map_location="cpu", weights_only=True)
        except Exception as e:  # an unsafe pickle or a corrupt file
            raise UserError(f"{binf}: cannot load with weights_only=True ({type(e).__name__})") from None
    raise UserError(f"draft model folder {folder} has no model.safetensors or pytorch_model.bin")


def save_head_folder(model: Eagle3DraftModel, folder: Path, dtype: torch.dtype | None = None) -> Path:
    """Write a head in the published layout (config.json + model.safetensors); floating tensors in `dtype`
    when given (published heads are float16; loading casts to the engine's dtype)."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    hc = model.config
    cfg = hc.layer.to_hf_dict()
    cfg.update(
        architectures=["LlamaForCausalLMEagle3"],
        num_hidden_layers=1,
        draft_vocab_size=hc.draft_vocab_size,
        target_hidden_size=hc.target_hidden_size,
        eagle_config={"eagle_aux_hidden_state_layer_ids": list(hc.capture_layers), "use_aux_hidden_state": True},
        norm_before_residual=hc.norm_before_residual,
    )
    if dtype is not None:
        cfg["torch_dtype"] = str(dtype).removeprefix("torch.")
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    state = {
        k: (v.to(dtype) if dtype is not None and v.is_floating_point() else v).detach().contiguous().cpu()
        for k, v in model.state_dict().items()
        if "rotary" not in k
    }
    save_file(state, str(folder / "model.safetensors"))
    return folder


# Heads that ship with the package, by the engine's model name (reproduce with `specdec-eval draft train`).
SHIPPED_HEADS = {"smollm2": Path(__file__).parent / "heads" / "smollm2-eagle3"}


def resolve_draft_model(draft_model: str, model: str) -> str:
    """'auto' means the shipped head of the embedded model, the random canary for the `tiny` test model, and
    an error for anything else (a silent random head would report acceptance 1 as if it were a finding)."""
    if draft_model != "auto":
        return draft_model
    if model in SHIPPED_HEADS:
        return str(SHIPPED_HEADS[model])
    if model == "tiny":
        return "random"
    raise UserError(
        f"no Eagle3 head ships for model {model!r}; pass --draft-model FOLDER (or 'random', the correctness canary)"
    )


def build_draft_model(
    target: ModelConfig, draft_model: str, capture_layers: tuple[int, ...] | None, seed: int, tp: TPGroup | None = None
) -> Eagle3DraftModel:
    if draft_model == "random":
        hc = Eagle3HeadConfig.for_target(target, capture_layers)
        hc.check_against(target)
        model = Eagle3DraftModel(hc, tp)
        model.init_random(seed)
        return model
    cfg, tensors = read_head_folder(Path(draft_model).expanduser())
    hc = Eagle3HeadConfig.from_json(cfg, target, capture_layers)
    hc.check_against(target)
    model = Eagle3DraftModel(hc, tp)
    model.load_tensors(tensors.items())
    return model
