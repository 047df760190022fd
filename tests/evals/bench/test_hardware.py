"""The hardware probes: positive, finite rates on tiny sizes, and the limits object built from them."""

from __future__ import annotations

import math

import pytest
import torch
from specdec_eval.evals.bench.hardware import HardwareLimits, bandwidth_gbs, gemm_gflops, measure_limits


def test_gemm_probe_is_positive_and_finite():
    rate = gemm_gflops(size=64, repeats=2)
    assert math.isfinite(rate) and rate > 0


def test_bandwidth_probes_are_positive_and_finite():
    read, copy = bandwidth_gbs(mib=4, repeats=2)
    assert all(math.isfinite(x) and x > 0 for x in (read, copy))


def test_limits_record_the_thread_count_and_take_the_best_of_two():
    a = measure_limits("cpu", gemm_size=64, bandwidth_mib=4, repeats=2)
    assert a.threads == torch.get_num_threads() and a.device == "cpu" and a.gemm_size == 64
    assert a.bandwidth_gbs == max(a.read_gbs, a.copy_gbs)
    b = HardwareLimits("cpu", a.threads, a.gemm_gflops * 2, 64, a.read_gbs / 2, a.copy_gbs * 3, 4, 2)
    best = a.best(b)
    assert (best.gemm_gflops, best.read_gbs, best.copy_gbs, best.repeats) == (b.gemm_gflops, a.read_gbs, b.copy_gbs, 4)
    assert set(best.to_dict()) >= {"gemm_gflops", "bandwidth_gbs", "threads"} and "GFLOP/s" in best.describe()


@pytest.mark.parametrize("call", [lambda: gemm_gflops(0), lambda: bandwidth_gbs(4, 0)])
def test_nonsense_sizes_are_refused(call):
    with pytest.raises(ValueError, match="positive"):
        call()


@pytest.mark.slow
def test_probe_in_a_fresh_process_matches_its_thread_count():
    from specdec_eval.evals.bench.hardware import measure_limits_apart

    limits = measure_limits_apart("cpu", gemm_size=64, bandwidth_mib=4, repeats=2)
    assert limits.threads == torch.get_num_threads() and limits.gemm_gflops > 0 and limits.bandwidth_gbs > 0
