"""Paged KV cache bookkeeping (no torch): the block pool, the v1/v2 manager policies, and pool sizing."""

from __future__ import annotations

from collections.abc import Callable

from ...errors import UserError
from ..registry import KV_CACHE_MANAGERS, resolve
from .layout import KVLayout, size_kv_cache
from .manager import KVCacheManager
from .pool import BlockPool, NoFreeBlocks, block_hash
from .v1 import KVCacheManagerV1
from .v2 import KVCacheManagerV2


def manager_class(version: str) -> type[KVCacheManager]:
    try:
        return resolve(KV_CACHE_MANAGERS[version])
    except KeyError:
        known = ", ".join(KV_CACHE_MANAGERS)
        raise UserError(f"unknown kv-cache version {version!r} (known: {known})") from None


def make_kv_cache_manager(
    layout: KVLayout,
    *,
    enable_block_reuse: bool,
    window_tokens: int = 1,
    max_batch_size: int | None = None,
    leaks_on_rewind: Callable[[], bool] | None = None,
) -> KVCacheManager:
    """The manager of `layout.version` over a pool of `layout.num_blocks` blocks (`leaks_on_rewind`: a planted bug,
    see KVCacheManager)."""
    return manager_class(layout.version)(
        layout.num_blocks,
        layout.block_size,
        enable_block_reuse=enable_block_reuse,
        window_tokens=window_tokens,
        max_batch_size=max_batch_size,
        leaks_on_rewind=leaks_on_rewind,
    )


__all__ = [
    "KV_CACHE_MANAGERS",
    "BlockPool",
    "KVCacheManager",
    "KVCacheManagerV1",
    "KVCacheManagerV2",
    "KVLayout",
    "NoFreeBlocks",
    "block_hash",
    "make_kv_cache_manager",
    "manager_class",
    "size_kv_cache",
]
