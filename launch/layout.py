"""How N ranks split into tensor-parallel groups and data-parallel replicas.

Ranks [0, tp) form TP group 0, [tp, 2tp) group 1, and so on: consecutive ranks share a node, so TP traffic
stays on the fast links. Each TP group is one data-parallel replica serving its share of the samples."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UserError


@dataclass(frozen=True)
class Layout:
    world_size: int
    tp: int

    @property
    def dp(self) -> int:
        return self.world_size // self.tp

    def tp_group_of(self, rank: int) -> list[int]:
        first = (rank // self.tp) * self.tp
        return list(range(first, first + self.tp))

    def dp_index_of(self, rank: int) -> int:
        return rank // self.tp

    def describe(self) -> str:
        groups = "; ".join(
            f"replica {d}: ranks {','.join(map(str, self.tp_group_of(d * self.tp)))}" for d in range(self.dp)
        )
        return f"{self.world_size} ranks = TP {self.tp} x DP {self.dp} ({groups})"


def default_tp(world_size: int, num_heads: int, num_kv_heads: int) -> int:
    """The largest TP size that divides the world and both head counts (the rest of the ranks become DP)."""
    return max(
        t for t in range(1, world_size + 1) if world_size % t == 0 and num_heads % t == 0 and num_kv_heads % t == 0
    )


def plan_layout(world_size: int, num_heads: int, num_kv_heads: int, tp: int | None = None) -> Layout:
    if world_size < 1:
        raise UserError(f"--gpus must be at least 1, got {world_size}")
    if tp is None:
        tp = default_tp(world_size, num_heads, num_kv_heads)
    if tp < 1 or world_size % tp:
        raise UserError(f"--tp {tp} does not divide the {world_size} ranks")
    if num_heads % tp or num_kv_heads % tp:
        raise UserError(f"--tp {tp} does not divide the model's {num_heads} attention / {num_kv_heads} KV heads")
    return Layout(world_size, tp)
