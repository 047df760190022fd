"""SwiGLU feed-forward: down(silu(gate(x)) * up(x)), gate/up column-parallel, down row-parallel."""

import torch
import torch.nn.functional as F
from torch import nn

from ..parallel import TPGroup
from .linear import ColumnParallelLinear, RowParallelLinear


class SwiGLU(nn.Module):
    def __init__(self, hidden: int, intermediate: int, tp: TPGroup) -> None:
        super().__init__()
        self.gate_proj = ColumnParallelLinear(hidden, intermediate, bias=False, tp=tp)
        self.up_proj = ColumnParallelLinear(hidden, intermediate, bias=False, tp=tp)
        self.down_proj = RowParallelLinear(intermediate, hidden, bias=False, tp=tp)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # In place on the fresh gate output: the same values, one [T, intermediate] buffer fewer per layer (autograd
        # keeps what training needs).
        return self.down_proj(F.silu(self.gate_proj(x), inplace=True).mul_(self.up_proj(x)))
