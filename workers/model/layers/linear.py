"""Linear layers sharded for tensor parallelism. Each parameter carries a `weight_loader` that cuts its shard
from the full checkpoint tensor, so loading code never needs to know how a layer is split."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..parallel import TPGroup

# Rows for which `weight @ x.T` beats F.linear on CPU in float32 (measured on this machine's MKL, see linear()).
_FEW_ROWS = range(2, 65)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear, except for a few rows on CPU in float32. There MKL's sgemm runs 2-64 rows at a fraction of its
    speed (the 49152-row lm_head: 1 row 7 ms, 4 rows 17 ms), while the same product written as weight @ x.T
    takes 5 ms for 4 rows and ties at 1. Speculative verification (K + 1 rows per request) lives in that range."""
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    if x.device.type == "cpu" and x.dtype == torch.float32 and rows in _FEW_ROWS:
        out = (weight @ x.reshape(rows, x.shape[-1]).t()).t().contiguous().view(*x.shape[:-1], weight.shape[0])
        return out if bias is None else out + bias
    return F.linear(x, weight, bias)


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
        return linear(x, self.weight, self.bias)


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
        out = self.tp.all_reduce(linear(x, self.weight))
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
