"""The training-time-test objective (EAGLE-3): the head is trained on the inputs it will see when drafting.

For a sequence with target features f_0..f_{n-1} (positions the target computed), tokens t_0..t_n and target
predictions y_p = argmax of the target at position p:

- step 0, anchor a: hidden fc(f_a), token t_{a+1}, position a; predicts y_{a+1}. Every anchor runs (its keys
  are the context that later steps attend to), exactly as draft pass 0 writes the draft KV for every position.
- step j >= 1, anchor a: hidden = the head's own step j-1 output at a, token t_{a+j+1}, position a+j; predicts
  y_{a+j+1}. Its attention sees step-0 keys of anchors <= a plus the keys of its own steps 1..j, which is what
  the draft KV holds at drafting step j.

Later steps run only on a subset of anchors (the loss anchors) to keep a CPU epoch short; losses are weighted
0.8^j. Hard labels: greedy acceptance only asks whether the head's argmax equals the target's.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..model.layers.rotary import apply_rotary
from ..spec.eagle3_head import Eagle3DraftModel

STEP_WEIGHT = 0.8


def ttt_loss(
    draft: Eagle3DraftModel,
    embed: torch.Tensor,
    tokens: torch.Tensor,
    features: torch.Tensor,
    labels: torch.Tensor,
    t2d: torch.Tensor,
    anchors: torch.Tensor,
    num_steps: int,
) -> tuple[torch.Tensor, list[tuple[int, int]]]:
    """Weighted mean cross-entropy over steps, and (correct, counted) top-1 per step for progress lines.

    labels [n]: the target's prediction at each position (target ids); t2d [V_target]: draft id or -100."""
    total = torch.zeros((), dtype=torch.float32)
    counted = 0
    stats: list[tuple[int, int]] = []
    for j, (rows, logits) in enumerate(ttt_logits(draft, embed, tokens, features, anchors, num_steps)):
        want = t2d[labels[rows + j + 1].to(torch.int64)]
        total = total + (STEP_WEIGHT**j) * F.cross_entropy(logits, want, ignore_index=-100, reduction="sum")
        valid = want != -100
        counted += int(valid.sum())
        stats.append((int((logits.argmax(-1) == want)[valid].sum()), int(valid.sum())))
    return total / max(counted, 1), stats


def ttt_logits(
    draft: Eagle3DraftModel,
    embed: torch.Tensor,
    tokens: torch.Tensor,
    features: torch.Tensor,
    anchors: torch.Tensor,
    num_steps: int,
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per step j: (anchors a it ran for, draft-vocabulary logits predicting position a + j + 1).

    tokens [n+1] (the target's tokens), features [n, 3H] (float16 is fine), anchors sorted in [0, n-2]."""
    n = features.shape[0]
    layer = draft.midlayer
    attn = layer.self_attn
    heads, kvh, d = attn.num_heads, attn.num_kv_heads, attn.head_dim
    scale = 1.0 / math.sqrt(d)
    dtype = draft.fc.weight.dtype
    emb = F.embedding(tokens.to(torch.int64), embed).to(dtype)

    def inputs(hidden: torch.Tensor, token_rows: torch.Tensor, positions: torch.Tensor):
        normed = layer.hidden_norm(hidden)
        x = torch.cat([layer.input_layernorm(emb[token_rows]), normed], dim=-1)
        residual = normed if draft.config.norm_before_residual else hidden
        t = x.shape[0]
        q = attn.q_proj(x).view(t, heads, d)
        k = attn.k_proj(x).view(t, kvh, d)
        v = attn.v_proj(x).view(t, kvh, d)
        if attn.q_norm is not None:
            q, k = attn.q_norm(q), attn.k_norm(k)
        cos, sin = draft.rotary.cos_sin(positions, dtype)
        return residual, apply_rotary(q, cos, sin), apply_rotary(k, cos, sin), v

    def finish(residual: torch.Tensor, attn_out: torch.Tensor) -> torch.Tensor:
        h = residual + attn.o_proj(attn_out.reshape(attn_out.shape[0], heads * d))
        return h + layer.mlp(layer.post_attention_layernorm(h))

    def logits_of(out: torch.Tensor) -> torch.Tensor:
        return draft.lm_head(draft.norm(out)).float()

    # Step 0 over every anchor 0..n-2 (positions a, tokens t_{a+1}): their keys are the context of later steps.
    num_anchors = n - 1
    pos0 = torch.arange(num_anchors)
    residual, q0, k0, v0 = inputs(draft.fc(features[:num_anchors].to(dtype)), pos0 + 1, pos0)
    o0 = F.scaled_dot_product_attention(
        q0.transpose(0, 1)[None], k0.transpose(0, 1)[None], v0.transpose(0, 1)[None], is_causal=True, enable_gqa=True
    )[0].transpose(0, 1)
    rows = anchors
    out = finish(residual, o0)[rows]
    results = [(rows, logits_of(out))]

    group = heads // kvh
    k0h, v0h = k0.repeat_interleave(group, dim=1), v0.repeat_interleave(group, dim=1)  # [A, heads, d]
    own_k: list[torch.Tensor] = []
    own_v: list[torch.Tensor] = []
    for j in range(1, num_steps):
        keep = rows + j + 1 <= n - 1  # the step's token and its label exist
        rows, out = rows[keep], out[keep]
        own_k, own_v = [k[keep] for k in own_k], [v[keep] for v in own_v]
        if len(rows) == 0:
            break
        residual, q, k, v = inputs(out, rows + j + 1, rows + j)
        own_k.append(k.repeat_interleave(group, dim=1))
        own_v.append(v.repeat_interleave(group, dim=1))
        ctx = torch.einsum("shd,ahd->hsa", q, k0h) * scale  # [heads, S, A]: step-0 keys of anchors <= a
        ctx = ctx.masked_fill(torch.arange(num_anchors)[None, None, :] > rows[None, :, None], float("-inf"))
        own = torch.stack([(q * ok).sum(-1) for ok in own_k], dim=-1).transpose(0, 1) * scale  # [heads, S, j]
        p = torch.cat([ctx, own], dim=-1).softmax(-1)
        o = torch.einsum("hsa,ahd->shd", p[..., :num_anchors], v0h)
        o = o + torch.einsum("hsj,jshd->shd", p[..., num_anchors:], torch.stack(own_v))
        out = finish(residual, o)
        results.append((rows, logits_of(out)))
    return results
