"""KV-cache bookkeeping: the block pool, the v1/v2 managers under the same fake traffic, and pool sizing.

No torch: the managers deal in block ids only. The fake engine keeps a shadow of what each block slot holds
(the token whose KV was last written there), which is how the tests see a block shared by mistake or a stale
block reused for a prefix.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections import Counter, deque
from dataclasses import dataclass

import pytest
from specdec_eval.workers.config import KVCacheConfig
from specdec_eval.workers.kv_cache import (
    KV_CACHE_MANAGERS,
    BlockPool,
    KVCacheManager,
    KVCacheManagerV1,
    KVCacheManagerV2,
    KVLayout,
    NoFreeBlocks,
    block_hash,
    make_kv_cache_manager,
    manager_class,
    size_kv_cache,
)
from specdec_eval.workers.loading.model_config import ModelConfig

from specdec_eval.errors import UserError

BS = 4  # tokens per block: small, so block boundaries come up often
W = 4  # window: 1 + max_draft_len 3
VERSIONS = ["v1", "v2"]


def make(version: str, num_blocks: int, *, reuse: bool = True, window: int = W, **kw: object) -> KVCacheManager:
    return manager_class(version)(num_blocks, BS, enable_block_reuse=reuse, window_tokens=window, **kw)


def blocks_for(n: int) -> int:
    return -(-n // BS)


# ----- the same fake traffic through v1 and v2 -----


@dataclass
class FakeRequest:
    rid: int
    tokens: list[int]  # prompt + output so far; the last token has no KV yet once prefilled
    max_total: int
    prefilled: bool = False
    committed: int = 0  # positions with final KV
    covered: int = 0  # positions the manager promised to cover


class FakeEngine:
    """Drives a manager the way the scheduler and the spec-dec step do, checking it after every step."""

    def __init__(self, mgr: KVCacheManager, rng: random.Random) -> None:
        self.mgr = mgr
        self.rng = rng
        self.shadow: dict[int, list[int | None]] = {}
        self.running: dict[int, FakeRequest] = {}
        self.waiting: deque[FakeRequest] = deque()
        self.finished = 0
        self.preemptions = 0
        self.aborts = 0
        self.reused_tokens = 0

    def run(self, requests: list[FakeRequest], max_steps: int = 20_000) -> None:
        self.waiting.extend(requests)
        for _ in range(max_steps):
            if not self.waiting and not self.running:
                return
            for _ in range(2):  # at most two admissions per step, head of the queue first
                if not self.waiting or not self.admit(self.waiting[0]):
                    break
                req = self.waiting.popleft()
                self.running[req.rid] = req
            assert self.running, "the head request cannot be admitted into an empty cache"
            for req in list(self.running.values()):
                self.step(req)
            self.check()
        raise AssertionError("traffic did not finish")

    def admit(self, req: FakeRequest) -> bool:
        reused = self.mgr.admit(req.rid, req.tokens, req.max_total)
        if reused is None:
            return False
        assert reused % BS == 0 and reused <= len(req.tokens) - 1
        table = self.mgr.block_table(req.rid)
        for pos in range(reused):  # a prefix hit must hold exactly this prompt's KV
            assert self.shadow[table[pos // BS]][pos % BS] == req.tokens[pos]
        self.reused_tokens += reused
        req.prefilled, req.committed = False, reused
        req.covered = min(len(req.tokens) + W, req.max_total + W - 1)
        assert len(table) * BS >= req.covered
        return True

    def write(self, req: FakeRequest, pos: int, token: int) -> None:
        block = self.mgr.block_table(req.rid)[pos // BS]
        assert self.mgr.pool.ref_count(block) == 1, f"request {req.rid} writes into shared block {block}"
        self.shadow.setdefault(block, [None] * BS)[pos % BS] = token

    def step(self, req: FakeRequest) -> None:
        if self.rng.random() < 0.01:  # client cancels mid-flight, drafts and all
            self.mgr.free(req.rid)
            del self.running[req.rid]
            self.aborts += 1
            return
        if not req.prefilled:
            self.prefill(req)
        else:
            self.generate(req)
        if len(req.tokens) >= req.max_total:
            self.mgr.free(req.rid)
            del self.running[req.rid]
            self.finished += 1

    def prefill(self, req: FakeRequest) -> None:
        # Context step: target KV for the prompt, draft-layer KV a few positions past it.
        p = len(req.tokens)
        extent = min(p + W - 1, req.max_total + W - 1)
        assert self.mgr.ensure_capacity(req.rid, extent), "admission covers the context step"
        for pos in range(req.committed, p):
            self.write(req, pos, req.tokens[pos])
        for pos in range(p, extent):
            self.write(req, pos, -1)
        self.mgr.commit(req.rid, req.tokens)
        self.mgr.rewind(req.rid, p)
        req.tokens.append(self.rng.randrange(1000))
        req.prefilled, req.committed, req.covered = True, p, p

    def generate(self, req: FakeRequest) -> None:
        kv = len(req.tokens) - 1
        if not self.mgr.ensure_capacity(req.rid, kv + W):
            assert isinstance(self.mgr, KVCacheManagerV2), "v1 reserved the whole sequence"
            self.mgr.free(req.rid)  # preempt; recompute later from all tokens so far
            del self.running[req.rid]
            self.waiting.appendleft(req)
            self.preemptions += 1
            return
        req.covered = kv + W
        drafts = [self.rng.randrange(1000) for _ in range(W - 1)]
        for pos, token in enumerate([req.tokens[-1], *drafts], start=kv):
            self.write(req, pos, token)
        accepted = self.rng.randint(0, W - 1)
        new = [*drafts[:accepted], self.rng.randrange(1000)][: req.max_total - len(req.tokens)]
        req.tokens.extend(new)
        req.committed = req.covered = len(req.tokens) - 1
        self.mgr.commit(req.rid, req.tokens[: req.committed])
        self.mgr.rewind(req.rid, req.committed)

    def check(self) -> None:
        mgr, pool = self.mgr, self.mgr.pool
        pool.check()
        tables = {rid: mgr.block_table(rid) for rid in self.running}
        refs = Counter(b for t in tables.values() for b in t)
        for b in range(mgr.num_blocks):
            assert pool.ref_count(b) == refs[b], f"block {b}: ref count {pool.ref_count(b)}, {refs[b]} tables"
        assert mgr.num_free_blocks == mgr.num_blocks - len(refs)
        for rid, table in tables.items():
            req = self.running[rid]
            assert len(set(table)) == len(table)
            assert len(table) * BS >= req.covered
            if isinstance(mgr, KVCacheManagerV2):
                assert len(table) == blocks_for(req.covered), "v2 frees whole blocks past a rewind"
            for i, b in enumerate(table):  # a block in two tables must be a committed full block in both
                if refs[b] > 1:
                    assert (i + 1) * BS <= req.committed
            for pos in range(req.committed):
                assert self.shadow[table[pos // BS]][pos % BS] == req.tokens[pos]
        if isinstance(mgr, KVCacheManagerV1):
            assert mgr.reserved_blocks() <= mgr.num_free_blocks

    def drain(self) -> None:
        for rid in list(self.running):
            self.mgr.free(rid)
        self.running.clear()


def fake_requests(rng: random.Random, n: int) -> list[FakeRequest]:
    # A few shared system prompts (some longer than a block, one empty) so prefix reuse happens.
    prefixes = [[rng.randrange(50) for _ in range(k)] for k in (0, 3, 6, 9, 13)]
    reqs = []
    for rid in range(n):
        prompt = rng.choice(prefixes) + [rng.randrange(1000) for _ in range(rng.randint(1, 8))]
        reqs.append(FakeRequest(rid, prompt, len(prompt) + rng.randint(1, 20)))
    return reqs


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("num_blocks", "reuse"), [(14, True), (64, True), (14, False)])
def test_same_fake_traffic_is_consistent(version: str, num_blocks: int, reuse: bool) -> None:
    rng = random.Random(1234)
    mgr = make(version, num_blocks, reuse=reuse, max_batch_size=8)
    engine = FakeEngine(mgr, rng)
    engine.run(fake_requests(rng, 80))
    engine.drain()

    assert engine.finished + engine.aborts == 80
    assert mgr.num_free_blocks == num_blocks, "blocks leaked"
    assert all(mgr.pool.ref_count(b) == 0 for b in range(num_blocks))
    mgr.pool.check()
    stats = mgr.stats()
    assert stats["blocks_used"] == 0 and stats["num_requests"] == 0
    assert 0 < stats["peak_blocks_used"] <= num_blocks
    assert stats["reuse_hit_tokens"] == engine.reused_tokens
    if reuse:
        assert engine.reused_tokens > 0 and stats["reuse_queried_tokens"] > 0
    else:
        assert engine.reused_tokens == 0 and stats["blocks_cached_free"] == 0
    if version == "v2" and num_blocks == 14:
        assert engine.preemptions > 0 and stats["capacity_failures"] == engine.preemptions
    if version == "v1":
        assert engine.preemptions == 0 and stats["capacity_failures"] == 0


# ----- prefix reuse -----


@pytest.mark.parametrize("version", VERSIONS)
def test_reuse_hits_shared_prompts_only(version: str) -> None:
    mgr = make(version, 32)
    prompt = list(range(100, 110))  # 10 tokens: two full blocks lie within the first 9
    assert mgr.admit("a", prompt, 20) == 0
    mgr.commit("a", prompt)

    assert mgr.admit("b", prompt, 20) == 8
    shared = mgr.block_table("a")[:2]
    assert mgr.block_table("b")[:2] == shared
    assert [mgr.pool.ref_count(b) for b in shared] == [2, 2]
    assert mgr.block_table("b")[2] != mgr.block_table("a")[2]

    assert mgr.admit("c", [7, *prompt[1:]], 20) == 0  # differs in the first token
    assert mgr.admit("d", [*prompt[:4], 7, *prompt[5:]], 20) == 4  # differs in the second block
    stats = mgr.stats()
    assert stats["reuse_hit_tokens"] == 12 and stats["reuse_queried_tokens"] == 40


@pytest.mark.parametrize("version", VERSIONS)
def test_reuse_leaves_the_last_prompt_token_to_compute(version: str) -> None:
    mgr = make(version, 32)
    prompt = list(range(9))
    mgr.admit("a", prompt, 12)
    mgr.commit("a", prompt)  # blocks [0..3] and [4..7] are full and committed
    assert mgr.admit("exact-two-blocks", prompt[:8], 12) == 4  # block [4..7] holds its last token
    assert mgr.admit("one-more", prompt, 12) == 8
    assert mgr.admit("short", prompt[:4], 12) == 0


@pytest.mark.parametrize("version", VERSIONS)
def test_reuse_disabled(version: str) -> None:
    mgr = make(version, 16, reuse=False)
    prompt = list(range(12))
    mgr.admit("a", prompt, 12)
    mgr.commit("a", prompt)
    assert mgr.admit("b", prompt, 12) == 0
    mgr.free("a")
    assert mgr.stats()["blocks_cached_free"] == 0 and mgr.stats()["reuse_queried_tokens"] == 0


@pytest.mark.parametrize("version", VERSIONS)
def test_only_committed_full_blocks_are_published(version: str) -> None:
    mgr = make(version, 16)
    prompt = [1, 2, 3, 4, 5]
    mgr.admit("a", prompt, 20)
    mgr.commit("a", prompt)
    assert mgr.ensure_capacity("a", 9)  # drafts at positions 5..8 fill block 1, uncommitted
    seq = [*prompt, 6, 7, 8, 9, 10]
    assert mgr.admit("b", seq, 20) == 4
    mgr.commit("a", seq[:8])  # block 1 is now final
    assert mgr.admit("c", seq, 20) == 8


@pytest.mark.parametrize("version", VERSIONS)
def test_reused_block_is_not_handed_out_while_referenced(version: str) -> None:
    mgr = make(version, 12)
    prompt = list(range(9))
    mgr.admit("a", prompt, 9)
    mgr.commit("a", prompt)
    assert mgr.admit("b", prompt, 9) == 8
    shared = mgr.block_table("b")[:2]
    mgr.free("a")
    assert [mgr.pool.ref_count(b) for b in shared] == [1, 1]
    i = 0
    while mgr.admit(i, [100 + i] * 5, 13) is not None:  # fill the pool with other traffic
        i += 1
    for j in range(i):  # and grow it as far as the pool allows (v1: within each reservation)
        n = 5 + W
        while n <= 13 + W - 1 and mgr.ensure_capacity(j, n):
            n += 1
    assert mgr.num_free_blocks <= 1
    used_elsewhere = {b for i in range(20) if mgr.has(i) for b in mgr.block_table(i)}
    assert not used_elsewhere & set(shared)
    assert mgr.block_table("b")[:2] == shared


@pytest.mark.parametrize("version", VERSIONS)
def test_freed_cached_blocks_are_reused_then_evicted(version: str) -> None:
    mgr = make(version, 6)
    prompt = list(range(9))
    mgr.admit("a", prompt, 9)  # limit 12 positions: 3 blocks
    mgr.commit("a", prompt)
    cached = mgr.block_table("a")[:2]
    mgr.free("a")
    assert mgr.num_free_blocks == 6 and mgr.stats()["blocks_cached_free"] == 2

    # A freed block without content is handed out before cached ones.
    assert mgr.admit("x", [50, 51, 52, 53, 54], 5) == 0  # 2 blocks, neither of them cached
    assert not set(mgr.block_table("x")) & set(cached)
    mgr.free("x")

    assert mgr.admit("b", prompt, 9) == 8
    assert mgr.block_table("b")[:2] == cached
    assert mgr.num_free_blocks == 3  # two revived from the free list, one new
    mgr.free("b")

    big = [200 + i for i in range(20)]  # needs all 6 blocks: the cached ones must be evicted
    assert mgr.admit("big", big, 20) == 0
    assert set(cached) <= set(mgr.block_table("big"))
    assert mgr.stats()["blocks_cached_free"] == 0
    mgr.free("big")
    assert mgr.admit("c", prompt, 9) == 0  # the old prefix is gone


# ----- rewind -----


@pytest.mark.parametrize("version", VERSIONS)
def test_rewind_keeps_committed_blocks(version: str) -> None:
    mgr = make(version, 16)
    tokens = list(range(10, 20))
    mgr.admit("a", tokens[:6], 30)
    mgr.commit("a", tokens[:6])
    assert mgr.ensure_capacity("a", 13)  # 4 blocks
    free_before = mgr.num_free_blocks
    mgr.commit("a", tokens[:9])  # blocks 0 and 1 final
    mgr.rewind("a", 9)
    if version == "v2":
        assert len(mgr.block_table("a")) == 3 and mgr.num_free_blocks == free_before + 1
    else:
        assert len(mgr.block_table("a")) == 4 and mgr.num_free_blocks == free_before
    with pytest.raises(ValueError, match="rewind"):
        mgr.rewind("a", 8)  # below committed KV
    assert mgr.admit("b", [*tokens[:9], 99], 30) == 8  # the committed blocks are still published
    assert mgr.block_table("b")[:2] == mgr.block_table("a")[:2]


# ----- v1 versus v2 admission -----


def test_v1_refuses_what_v2_admits_on_demand() -> None:
    prompt = list(range(8))
    v1, v2 = make("v1", 8), make("v2", 8)
    assert v1.admit("long", prompt, 64) is None  # 64 + 3 positions need 17 blocks
    assert v1.stats()["admissions_refused"] == 1 and v1.num_free_blocks == 8
    assert v2.admit("long", prompt, 64) == 0
    assert len(v2.block_table("long")) == blocks_for(8 + W)

    kv = 8
    while v2.ensure_capacity("long", kv + W):
        kv += W
    assert kv + W > 8 * BS
    table, free = v2.block_table("long"), v2.num_free_blocks
    assert not v2.ensure_capacity("long", kv + W)
    assert v2.block_table("long") == table and v2.num_free_blocks == free == 0
    assert v2.stats()["capacity_failures"] == 2


def test_v1_reservation_is_honoured() -> None:
    v1 = make("v1", 8)
    assert v1.admit("a", list(range(8)), 26) == 0  # 26 + 3 = 29 positions: 8 blocks reserved
    assert v1.reserved_blocks() == 8 - 3 and v1.num_free_blocks == 5
    assert v1.admit("b", [1, 2], 2) is None  # blocks are free, but promised to "a"
    for n in range(12, 30):
        assert v1.ensure_capacity("a", n)
    assert v1.num_free_blocks == 0 and v1.reserved_blocks() == 0
    with pytest.raises(ValueError, match="beyond its limit"):
        v1.ensure_capacity("a", 30)


def test_v2_reserves_a_window_for_every_live_request() -> None:
    v2 = make("v2", 10)  # prompt 4 + window 4: 2 blocks now, 1 more for the next window
    admitted = [i for i in range(6) if v2.admit(i, [i] * 4, 100) is not None]
    assert admitted == [0, 1, 2]  # a 4th would leave 2 free blocks for 4 windows
    assert v2.reserved_blocks() == 3 and v2.num_free_blocks == 4

    capped = make("v2", 10, max_batch_size=1)  # only the largest window counts
    assert [i for i in range(6) if capped.admit(i, [i] * 4, 100) is not None] == [0, 1, 2, 3]


def test_v2_window_need_is_block_boundary_aware() -> None:
    v2 = make("v2", 10, window=2)
    v2.admit("mid", [1, 2, 3, 4], 100)  # covers 6 positions in 2 blocks; the next window fits in the tail
    assert v2.reserved_blocks() == 0
    assert v2.ensure_capacity("mid", 8)
    assert v2.reserved_blocks() == 1  # now at a block boundary


# ----- misuse -----


@pytest.mark.parametrize("version", VERSIONS)
def test_misuse_raises(version: str) -> None:
    mgr = make(version, 8)
    mgr.admit("a", [1, 2, 3], 10)
    with pytest.raises(ValueError, match="already admitted"):
        mgr.admit("a", [1], 10)
    with pytest.raises(ValueError, match="empty prompt"):
        mgr.admit("e", [], 10)
    with pytest.raises(ValueError, match="max_total_tokens"):
        mgr.admit("e", [1, 2, 3], 2)
    with pytest.raises(KeyError):
        mgr.ensure_capacity("nope", 4)
    with pytest.raises(KeyError):
        mgr.free("nope")
    with pytest.raises(ValueError, match="ensured"):
        mgr.commit("a", list(range(20)))
    mgr.commit("a", [1, 2, 3])
    with pytest.raises(ValueError, match="rewind"):
        mgr.commit("a", [1, 2])
    mgr.free("a")
    assert not mgr.has("a") and mgr.num_free_blocks == 8


# ----- the pool itself -----


def test_pool_allocate_free_and_errors() -> None:
    pool = BlockPool(3, BS)
    blocks = [pool.allocate() for _ in range(3)]
    assert sorted(blocks) == [0, 1, 2] and pool.num_free_blocks == 0
    with pytest.raises(NoFreeBlocks):
        pool.allocate()
    pool.decref(blocks[0])
    with pytest.raises(ValueError, match="double free"):
        pool.decref(blocks[0])
    with pytest.raises(ValueError, match="allocate instead"):
        pool.incref(blocks[0])
    pool.check()


def test_pool_cached_blocks_survive_until_reallocated() -> None:
    pool = BlockPool(3, BS)
    a, b = pool.allocate(), pool.allocate()
    ha, hb = block_hash(None, [1, 2, 3, 4]), block_hash(None, [5, 6, 7, 8])
    assert pool.register(a, ha) and pool.register(b, hb)
    pool.decref(a)
    pool.decref(b)
    assert pool.num_free_blocks == 3 and pool.num_cached_free_blocks == 2
    # Uncached block 2 goes first, then the least recently freed cached block (a).
    assert pool.allocate() == 2
    assert pool.lookup(hb) == b and pool.ref_count(b) == 1 and pool.num_free_blocks == 1
    assert pool.allocate() == a and pool.peek(ha) is None and pool.hash_of(a) is None
    pool.check()


def test_pool_keeps_the_first_copy_of_duplicate_content() -> None:
    pool = BlockPool(2, BS)
    a, b = pool.allocate(), pool.allocate()
    h = block_hash(None, [1, 2, 3, 4])
    assert pool.register(a, h)
    assert not pool.register(b, h)
    assert pool.peek(h) == a and pool.hash_of(b) is None
    with pytest.raises(ValueError, match="another hash"):
        pool.register(a, block_hash(None, [9, 9, 9, 9]))
    pool.check()


def test_block_hash_is_chained_and_stable_across_processes() -> None:
    first = block_hash(None, [1, 2, 3, 4])
    assert block_hash(first, [5, 6, 7, 8]) != block_hash(None, [5, 6, 7, 8])
    code = (
        "from specdec_eval.workers.kv_cache import block_hash as h; print(h(h(None, [1, 2, 3, 4]), [5, 6, 7, 8]).hex())"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == block_hash(first, [5, 6, 7, 8]).hex()


# ----- sizing -----

SMOLLM2 = ModelConfig(
    model_type="llama",
    vocab_size=49152,
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    head_dim=64,
    name="SmolLM2-135M",
)
GIB = 2**30
PER_TOKEN = 2 * 31 * 3 * 64 * 4  # K and V, 30 target layers + 1 draft layer, 3 KV heads, head_dim 64, fp32


def size(cfg: KVCacheConfig, *, tp_size: int = 1, free_bytes: int = GIB) -> KVLayout:
    return size_kv_cache(cfg, SMOLLM2, tp_size=tp_size, dtype_bytes=4, free_bytes=free_bytes, num_extra_layers=1)


def test_sizing_smollm2_v1_and_v2_under_one_gib() -> None:
    v1 = size(KVCacheConfig(version="v1"))
    assert v1.bytes_per_token == PER_TOKEN == 47616
    assert v1.bytes_per_block == 16 * PER_TOKEN
    # floor(0.9 * 2**30) = 966367641 bytes -> 20295 tokens -> 1268 blocks of 16
    assert v1.budget_bytes == 966367641 and v1.num_blocks == 20295 // 16 == 1268
    assert v1.max_tokens == 1268 * 16 and v1.total_bytes == 1268 * 16 * PER_TOKEN
    assert (v1.num_layers, v1.num_kv_heads, v1.head_dim, v1.dtype_bytes) == (31, 3, 64, 4)
    v2 = size(KVCacheConfig(version="v2"))
    assert v2.num_blocks == 966367641 // (16 * PER_TOKEN) == 1268
    assert v2.to_dict()["max_tokens"] == v2.max_tokens and v2.to_dict()["version"] == "v2"


def test_sizing_with_max_tokens_gives_v2_more_blocks() -> None:
    v1 = size(KVCacheConfig(version="v1", max_tokens=8192))
    assert v1.num_blocks == 512
    v2 = size(KVCacheConfig(version="v2", max_tokens=8192))  # quota ceil(8192 * 47616 / 0.95) = 410600287
    assert v2.budget_bytes == 410600287 and v2.num_blocks == 538 > v1.num_blocks
    exact = size(KVCacheConfig(version="v2", max_tokens=8192, max_util_for_resume=1.0))
    assert exact.num_blocks == 512


def test_sizing_v2_byte_quota_and_tp() -> None:
    quota = size(KVCacheConfig(version="v2", max_total_bytes=100 * 2**20))
    assert quota.num_blocks == 100 * 2**20 // (16 * PER_TOKEN) == 137
    tp3 = size(KVCacheConfig(version="v1"), tp_size=3)
    assert tp3.num_kv_heads == 1 and tp3.bytes_per_token == 2 * 31 * 1 * 64 * 4
    with pytest.raises(UserError, match="TP size 2"):
        size(KVCacheConfig(), tp_size=2)


@pytest.mark.parametrize(
    "cfg",
    [
        KVCacheConfig(version="v1"),
        KVCacheConfig(version="v2"),
        KVCacheConfig(version="v2", max_total_bytes=1000),
    ],
)
def test_sizing_budget_below_one_block_is_a_user_error(cfg: KVCacheConfig) -> None:
    with pytest.raises(UserError, match="too small for even one block") as err:
        size(cfg, free_bytes=700_000)
    assert "761856 bytes" in str(err.value) and "47616 bytes/token" in str(err.value)
    with pytest.raises(UserError, match="max_tokens 8"):
        size(KVCacheConfig(version="v1", max_tokens=8))


# ----- registry -----


def test_registry_matches_config_versions_and_builds_managers() -> None:
    # The config validates against the registry itself: every registered version is accepted, nothing else.
    assert set(KV_CACHE_MANAGERS) == {"v1", "v2"}
    for version in KV_CACHE_MANAGERS:
        assert KVCacheConfig(version=version).version == version
    with pytest.raises(UserError, match="known: v1, v2"):
        KVCacheConfig(version="v3")
    for version, cls in (("v1", KVCacheManagerV1), ("v2", KVCacheManagerV2)):
        layout = size(KVCacheConfig(version=version, max_tokens=1024, max_util_for_resume=1.0))
        mgr = make_kv_cache_manager(layout, enable_block_reuse=True, window_tokens=4, max_batch_size=8)
        assert type(mgr) is cls and mgr.version == version
        assert (mgr.num_blocks, mgr.block_size, mgr.window_tokens, mgr.max_batch_size) == (64, 16, 4, 8)
    with pytest.raises(UserError, match="known: v1, v2"):
        manager_class("v3")
