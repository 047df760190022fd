"""This machine's limits, measured in the same process as the benchmark that is compared with them: the fp32 GEMM
peak (what prefill can reach) and the memory bandwidth (what decode can reach).

Measured, not looked up: machines of one name differ (this project's CPU changed from an AVX-512 Xeon to an
AVX2-only EPYC overnight), and a shared machine's free share changes by the hour, so a limit from another day
would make a fraction of it meaningless. Both probes run under torch's current thread count, the one the engine
runs under (the engine does not change it), and take the best of N repeats: the best repeat is the one the
neighbours disturbed least, which is what "limit" means. `measure_limits_apart` runs them in a fresh process, so
their buffers (twice `BANDWIDTH_MIB`) never count into the benchmark's own peak memory (on CPU, the peak RSS).
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace

import torch

GEMM_SIZE = 2048  # big enough to run at the peak of a 2-core CPU, small enough for a second per repeat
BANDWIDTH_MIB = 256  # far above any last-level cache, so the probe reads DRAM
REPEATS = 5


@dataclass(frozen=True)
class HardwareLimits:
    device: str
    threads: int  # torch.get_num_threads() during the probes
    gemm_gflops: float  # fp32 n x n @ n x n, 2 n^3 FLOP per product, best repeat
    gemm_size: int
    read_gbs: float  # a sum over a large fp32 tensor: bytes read / s, best repeat
    copy_gbs: float  # a copy between two large tensors: (bytes read + bytes written) / s, best repeat
    bandwidth_mib: int
    repeats: int

    @property
    def bandwidth_gbs(self) -> float:
        """The memory bandwidth decode is compared with: the faster of the two probes (the limit is the best
        rate this machine showed; decode mostly reads, like the sum)."""
        return max(self.read_gbs, self.copy_gbs)

    def best(self, other: HardwareLimits) -> HardwareLimits:
        """The faster of two probes of the same machine, rate by rate (the limit is the best rate it showed)."""
        return replace(
            self,
            gemm_gflops=max(self.gemm_gflops, other.gemm_gflops),
            read_gbs=max(self.read_gbs, other.read_gbs),
            copy_gbs=max(self.copy_gbs, other.copy_gbs),
            repeats=self.repeats + other.repeats,
        )

    def to_dict(self) -> dict:
        return {**asdict(self), "bandwidth_gbs": round(self.bandwidth_gbs, 2)}

    def describe(self) -> str:
        return (
            f"{self.device}, {self.threads} threads: fp32 GEMM {self.gemm_gflops:.1f} GFLOP/s "
            f"({self.gemm_size}x{self.gemm_size}, best of {self.repeats}); memory {self.bandwidth_gbs:.1f} GB/s "
            f"(read {self.read_gbs:.1f}, copy {self.copy_gbs:.1f}; {self.bandwidth_mib} MiB, best of "
            f"{self.repeats})"
        )


def _sync_for(device: torch.device) -> Callable[[], None]:
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def _best_seconds(work: Callable[[], object], sync: Callable[[], None], repeats: int) -> float:
    work()  # the first call pays for allocation and kernel selection
    sync()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        work()
        sync()
        best = min(best, time.perf_counter() - t0)
    return max(best, 1e-9)


@torch.inference_mode()
def gemm_gflops(size: int = GEMM_SIZE, repeats: int = REPEATS, device: str | torch.device = "cpu") -> float:
    """fp32 matrix product of two size x size matrices: 2 size^3 FLOP over the best repeat's seconds."""
    if size < 1 or repeats < 1:
        raise ValueError(f"size and repeats must be positive, got {size}, {repeats}")
    dev = torch.device(device)
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(size, size, generator=gen).to(dev)
    b = torch.randn(size, size, generator=gen).to(dev)
    out = torch.empty(size, size, device=dev)
    seconds = _best_seconds(lambda: torch.mm(a, b, out=out), _sync_for(dev), repeats)
    return 2 * size**3 / seconds / 1e9


@torch.inference_mode()
def bandwidth_gbs(mib: int = BANDWIDTH_MIB, repeats: int = REPEATS, device: str | torch.device = "cpu"):
    """(read GB/s, copy GB/s) over an fp32 tensor of `mib` MiB: a sum reads it once; a copy reads it and writes
    another of the same size (both bytes counted)."""
    if mib < 1 or repeats < 1:
        raise ValueError(f"size and repeats must be positive, got {mib} MiB, {repeats}")
    dev = torch.device(device)
    num_bytes = mib * 2**20
    src = torch.ones(num_bytes // 4, device=dev)
    dst = torch.empty_like(src)
    sync = _sync_for(dev)
    read_s = _best_seconds(lambda: src.sum(), sync, repeats)
    copy_s = _best_seconds(lambda: dst.copy_(src), sync, repeats)
    return num_bytes / read_s / 1e9, 2 * num_bytes / copy_s / 1e9


def measure_limits(
    device: str | torch.device = "cpu",
    gemm_size: int = GEMM_SIZE,
    bandwidth_mib: int = BANDWIDTH_MIB,
    repeats: int = REPEATS,
) -> HardwareLimits:
    """Both probes on `device`, under the current torch thread count."""
    dev = torch.device(device)
    gflops = gemm_gflops(gemm_size, repeats, dev)
    read, copy = bandwidth_gbs(bandwidth_mib, repeats, dev)
    return HardwareLimits(
        device=str(dev),
        threads=torch.get_num_threads(),
        gemm_gflops=round(gflops, 2),
        gemm_size=gemm_size,
        read_gbs=round(read, 2),
        copy_gbs=round(copy, 2),
        bandwidth_mib=bandwidth_mib,
        repeats=repeats,
    )


def _probe(device: str, threads: int, gemm_size: int, bandwidth_mib: int, repeats: int) -> HardwareLimits:
    torch.set_num_threads(threads)
    return measure_limits(device, gemm_size, bandwidth_mib, repeats)


def measure_limits_apart(
    device: str | torch.device = "cpu",
    gemm_size: int = GEMM_SIZE,
    bandwidth_mib: int = BANDWIDTH_MIB,
    repeats: int = REPEATS,
) -> HardwareLimits:
    """`measure_limits` in a fresh (spawned) process under this process's thread count; this process waits."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        job = pool.submit(_probe, str(device), torch.get_num_threads(), gemm_size, bandwidth_mib, repeats)
        return job.result()
