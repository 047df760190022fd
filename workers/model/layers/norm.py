"""RMSNorm as Llama defines it: normalise in float32, scale in the model dtype."""

import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x32 = x.float() if dtype in (torch.float16, torch.bfloat16) else x
        if torch.is_grad_enabled() or self.weight.dtype != dtype:  # training records every step
            x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
            return self.weight * x32.to(dtype)
        # Inference: the same operations in place where a temporary would be thrown away (bit for bit the same,
        # each rounds alike), so a prefill allocates and streams less.
        scale = x32.pow(2).mean(-1, keepdim=True).add_(self.eps).rsqrt_()
        return (x32 * scale).to(dtype).mul_(self.weight)
