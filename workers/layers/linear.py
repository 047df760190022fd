"""Linear layers sharded for tensor parallelism. Each parameter carries a `weight_loader` that cuts its shard
from the full checkpoint tensor, so loading code never needs to know how a layer is split."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..parallel import TPGroup


def _shard(full: torch.Tensor, dim: int, tp: TPGroup) -> torch.Tensor:
    size = full.shape[dim] // tp.size
    return full.narrow(dim, tp.rank * size, size)


class ColumnParallelLinear(nn.Module):
    """Output features split across ranks; each rank returns its slice (no communication)."""

    def __init__(self, in_features: int, out_features: int, bias: bool, tp: TPGroup) -> None:
        super().__init__()
        if out_features % tp.size:
            raise ValueError(f"output size {out_features} not divisible by TP size {tp.size}")
        self.tp = tp
        self.weight = nn.Parameter(torch.empty(out_features // tp.size, in_features))
        self.weight.weight_loader = self._load_rows
        self.bias = None
        if bias:
            self.bias = nn.Parameter(torch.empty(out_features // tp.size))
            self.bias.weight_loader = self._load_rows

    def _load_rows(self, param: nn.Parameter, full: torch.Tensor) -> None:
        param.data.copy_(_shard(full, 0, self.tp))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)


class RowParallelLinear(nn.Module):
    """Input features split across ranks; partial products are summed with an explicit all-reduce."""

    def __init__(self, in_features: int, out_features: int, bias: bool, tp: TPGroup) -> None:
        super().__init__()
        if in_features % tp.size:
            raise ValueError(f"input size {in_features} not divisible by TP size {tp.size}")
        self.tp = tp
        self.weight = nn.Parameter(torch.empty(out_features, in_features // tp.size))
        self.weight.weight_loader = self._load_columns
        self.bias = None
        if bias:
            self.bias = nn.Parameter(torch.empty(out_features))
            self.bias.weight_loader = _load_replicated

    def _load_columns(self, param: nn.Parameter, full: torch.Tensor) -> None:
        param.data.copy_(_shard(full, 1, self.tp))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.tp.all_reduce(F.linear(x, self.weight))
        # Bias after the reduction, so it is added once and not tp.size times.
        return out if self.bias is None else out + self.bias


class VocabParallelLMHead(nn.Module):
    """Logits split over the vocabulary; gathered on every rank so all ranks see the full row."""

    def __init__(self, hidden: int, vocab: int, tp: TPGroup) -> None:
        super().__init__()
        self.proj = ColumnParallelLinear(hidden, vocab, bias=False, tp=tp)
        self.tp = tp

    @property
    def weight(self) -> nn.Parameter:
        return self.proj.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.tp.all_gather_last_dim(self.proj(x))


def _load_replicated(param: nn.Parameter, full: torch.Tensor) -> None:
    param.data.copy_(full)
