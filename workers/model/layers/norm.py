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
        if self.weight.dtype != dtype:  # weight * x promotes; in place it could not
            x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
            return self.weight * x32.to(dtype)
        # The same operations in place where a temporary would be thrown away (bit for bit the same, each rounds
        # alike; autograd keeps what it needs), so a prefill allocates and streams less.
        scale = x32.pow(2).mean(-1, keepdim=True).add_(self.eps).rsqrt_()
        return (x32 * scale).to(dtype).mul_(self.weight)
