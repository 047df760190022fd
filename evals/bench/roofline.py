"""How far a measured prefill or decode rate is from this machine's limit: the work a phase does (FLOP for prefill,
bytes read for decode), from the model's shape, over its measured seconds, as a fraction of the measured GEMM
peak or memory bandwidth (both measured by `hardware`).

The formulas (printed with the numbers, so a reader can check them):

- prefill FLOP of a prompt of T tokens = 2 * P_layers * T  +  2 * V * H  +  2 * L * n_heads * head_dim * T * (T+1)
  P_layers: the decoder layers' matmul weights (q, k, v, o, gate, up, down; no embeddings, no norms), 2 FLOP per
  weight per token; the lm_head (V x H) only for the last position, where prefill samples; attention: Q K^T and
  P V over the causal half (T (T+1) / 2 pairs, 2 matmuls, 2 FLOP each) in each of L layers.
- decode bytes = steps * W  +  decode tokens * C * kv_bytes_per_token
  W: the weights one step reads (layers' matmuls and the lm_head, at the run's dtype; the embedding rows a step
  reads are negligible); C: the mean context a decode token attends over (the mean prompt plus about half the
  mean output); kv_bytes_per_token = 2 * L * kv_heads * head_dim * dtype bytes (K and V of every layer). A step
  reads every weight once whatever its batch, and each request's KV once.

What they leave out: element-wise work (norms, rotary, softmax, SiLU), the lm_head's reads of embedding rows,
writes of new KV; all small next to the matmuls for a 135M model at ~1000-token prompts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ...workers.loading.model_config import ModelConfig
from .hardware import HardwareLimits

PREFILL_FORMULA = (
    "prefill FLOP per prompt of T tokens = 2*P_layers*T + 2*V*H (lm_head, last position) "
    "+ 2*L*heads*head_dim*T*(T+1) (causal QK^T and PV)"
)
DECODE_FORMULA = (
    "decode bytes = steps*W (matmul weights + lm_head, read once per step) "
    "+ decode_tokens*C*kv_bytes_per_token (C: mean context = mean prompt + mean output/2)"
)
FORMULAS = {"prefill": PREFILL_FORMULA, "decode": DECODE_FORMULA}


def layer_matmul_params(cfg: ModelConfig) -> int:
    """Weights of the decoder layers' projections (what prefill multiplies every token by)."""
    h = cfg.hidden_size
    per_layer = h * cfg.q_size + 2 * h * cfg.kv_size + cfg.q_size * h + 3 * h * cfg.intermediate_size
    return cfg.num_hidden_layers * per_layer


def prefill_flop(cfg: ModelConfig, prompt_lens: Sequence[int]) -> float:
    """FLOP of prefilling each prompt in full (PREFILL_FORMULA)."""
    p, lm_head = layer_matmul_params(cfg), 2 * cfg.vocab_size * cfg.hidden_size
    attn = 2 * cfg.num_hidden_layers * cfg.num_attention_heads * cfg.head_dim
    return float(sum(2 * p * t + lm_head + attn * t * (t + 1) for t in prompt_lens))


def step_weight_bytes(cfg: ModelConfig, dtype_bytes: int) -> int:
    """W: the bytes of weights one forward step reads."""
    return (layer_matmul_params(cfg) + cfg.vocab_size * cfg.hidden_size) * dtype_bytes


def kv_bytes_per_token(cfg: ModelConfig, dtype_bytes: int) -> int:
    return 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim * dtype_bytes


def decode_bytes(cfg: ModelConfig, dtype_bytes: int, steps: float, decode_tokens: int, mean_context: float) -> float:
    """Bytes read by `steps` decode steps producing `decode_tokens` tokens at `mean_context` (DECODE_FORMULA)."""
    return steps * step_weight_bytes(cfg, dtype_bytes) + decode_tokens * mean_context * kv_bytes_per_token(
        cfg, dtype_bytes
    )


@dataclass(frozen=True)
class PhaseRates:
    """Prefill and decode of one measurement against the machine's limits."""

    prefill_gflops: float
    prefill_of_peak: float  # prefill GFLOP/s / GEMM peak
    decode_gbs: float
    decode_of_bandwidth: float  # decode GB/s / memory bandwidth

    def to_dict(self) -> dict:
        return {
            "prefill_gflops": round(self.prefill_gflops, 2),
            "prefill_of_peak": round(self.prefill_of_peak, 3),
            "decode_gbs": round(self.decode_gbs, 2),
            "decode_of_bandwidth": round(self.decode_of_bandwidth, 3),
        }


@dataclass(frozen=True)
class Roofline:
    """A model at a dtype on a machine with measured limits: turns phase timings into fractions of the limits."""

    config: ModelConfig
    dtype_bytes: int
    limits: HardwareLimits

    def rates(
        self,
        prompt_lens: Sequence[int],
        prefill_s: float,
        decode_steps: float,
        decode_tokens: int,
        mean_context: float,
        decode_s: float,
    ) -> PhaseRates:
        """Prefill of `prompt_lens` in prefill_s, and `decode_steps` steps making `decode_tokens` tokens at
        `mean_context` in decode_s; a phase that took no time has rate 0."""
        flop = prefill_flop(self.config, prompt_lens)
        num_bytes = decode_bytes(self.config, self.dtype_bytes, decode_steps, decode_tokens, mean_context)
        gflops = flop / prefill_s / 1e9 if prefill_s > 0 else 0.0
        gbs = num_bytes / decode_s / 1e9 if decode_s > 0 else 0.0
        return PhaseRates(gflops, gflops / self.limits.gemm_gflops, gbs, gbs / self.limits.bandwidth_gbs)
