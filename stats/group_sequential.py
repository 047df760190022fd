"""Group-sequential boundaries by recursive numerical integration, for a one-sided test with a lower (FAIL) and
an upper (PASS) boundary on the Z scale.

The canonical joint distribution (Jennison & Turnbull, *Group Sequential Methods*, 2000, ch. 3): at looks
k = 1..K with information I_1 < ... < I_K, the statistics Z_k = S_k / sqrt(I_k) come from a score process S_k
with independent Gaussian increments, S_k - S_{k-1} ~ N(delta * (I_k - I_{k-1}), I_k - I_{k-1}), S_0 = 0. So
Z_1 ~ N(delta * sqrt(I_1), 1) and, given Z_{k-1} = u,

    Z_k ~ N((u * sqrt(I_{k-1}) + delta * dI) / sqrt(I_k), dI / I_k),            dI = I_k - I_{k-1}.

The sub-density of Z_k on the continuation region (paths that crossed no boundary before k) follows from the
one at k-1 by integrating this Gaussian kernel over the earlier region (Armitage, McPherson & Rowe 1969; the
grid method of Jennison & Turnbull ch. 19). We integrate with Simpson's rule on a uniform grid that spans the
continuation interval (bounded at +-10 standard deviations around the mean), finer than one sixth of the next
increment's standard deviation, so that the narrow kernels of closely spaced looks are resolved. Crossing
probabilities need only the closed-form normal tail of that kernel, so a boundary is found by a one-dimensional
root search on a dot product.

Error spending (Lan & DeMets 1983): a spending function f(t) rises from f(0) = 0 to f(1) = level over the
information fraction t = I_k / I_K; look k may spend f(t_k) - f(t_{k-1}). The FAIL boundary a_k spends alpha
under delta = 0 with no PASS boundary at all (non-binding PASS: the false-FAIL rate stays <= alpha whether or not
a PASS is acted on); the PASS boundary b_k then spends beta under the alternative delta_1, with both boundaries
in place. At the last look b_K = a_K, so the test always decides there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq
from scipy.special import ndtr, ndtri

_SPAN = 10.0  # grid half-width in standard deviations around the mean of Z_k
_MAX_STEP = 0.05  # coarsest grid step on the Z scale
_MAX_POINTS = 4001  # cap per look (reached only with very many, very close looks)
_NO_SPEND = 1e-15  # below this a look spends nothing: its boundary is at infinity


@dataclass(frozen=True)
class Spending:
    """An error-spending function by name: `obf` (Lan-DeMets O'Brien-Fleming type), `pocock` (Lan-DeMets Pocock
    type), `power:RHO` (level * t^RHO), `hsd:GAMMA` (Hwang-Shih-DeCani: level * (1 - e^(-GAMMA t)) /
    (1 - e^(-GAMMA)); GAMMA = -4 is close to O'Brien-Fleming, more negative spends less early), `none` (only the
    last look spends: no early stop on this side)."""

    name: str

    def __post_init__(self) -> None:
        self.cumulative(np.array([0.5]), 0.05)  # validates the name and its parameter

    def cumulative(self, t: np.ndarray, level: float) -> np.ndarray:
        """The error spent up to information fraction t (an array in (0, 1]); exactly `level` at t = 1."""
        t = np.clip(np.asarray(t, dtype=float), 0.0, 1.0)
        kind, _, arg = self.name.partition(":")
        if kind == "obf" and not arg:
            with np.errstate(divide="ignore"):
                spent = 2.0 - 2.0 * ndtr(ndtri(1.0 - level / 2.0) / np.sqrt(t))
        elif kind == "pocock" and not arg:
            spent = level * np.log1p((math.e - 1.0) * t)
        elif kind == "power" and _number(arg) > 0:
            spent = level * t ** _number(arg)
        elif kind == "hsd" and arg:
            gamma = _number(arg)
            spent = level * t if gamma == 0 else level * (1.0 - np.exp(-gamma * t)) / (1.0 - math.exp(-gamma))
        elif kind == "none" and not arg:
            spent = np.where(t >= 1.0, level, 0.0)
        else:
            raise ValueError(f"unknown spending function '{self.name}'; known: obf, pocock, power:RHO, hsd:GAMMA, none")
        return np.where(t >= 1.0, level, np.minimum(spent, level))

    def increments(self, fractions: np.ndarray, level: float) -> np.ndarray:
        """What each look may spend: f(t_k) - f(t_{k-1}), summing to exactly `level`."""
        return np.diff(np.concatenate([[0.0], self.cumulative(fractions, level)]))


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"spending parameter '{text}' is not a number") from None


@dataclass
class _Mass:
    """The continuation sub-density of Z at one look on a Simpson grid: points z, weights x density wf."""

    z: np.ndarray
    wf: np.ndarray
    info: float


_START = _Mass(np.zeros(1), np.ones(1), 0.0)  # S_0 = 0 with probability 1, at information 0


def _kernel_mean_sd(prev: _Mass, info: float, drift: float) -> tuple[np.ndarray, float]:
    """Mean (per grid point) and sd of S_k given Z_{k-1} at each point of prev's grid."""
    d_info = info - prev.info
    return prev.z * math.sqrt(prev.info) + drift * d_info, math.sqrt(d_info)


def _exits(prev: _Mass, info: float, drift: float, lo: float, hi: float) -> tuple[float, float]:
    """P(continue to k and Z_k < lo), P(continue to k and Z_k >= hi)."""
    mean, sd = _kernel_mean_sd(prev, info, drift)
    root = math.sqrt(info)
    below = float(prev.wf @ ndtr((lo * root - mean) / sd)) if lo > -math.inf else 0.0
    above = float(prev.wf @ ndtr((mean - hi * root) / sd)) if hi < math.inf else 0.0
    return below, above


def _advance(prev: _Mass, info: float, drift: float, lo: float, hi: float, step: float) -> _Mass:
    """The sub-density of Z_k on (lo, hi) for paths still running after look k."""
    centre = drift * math.sqrt(info)
    lo, hi = max(lo, centre - _SPAN), min(hi, centre + _SPAN)
    if not lo < hi:
        return _Mass(np.zeros(0), np.zeros(0), info)
    intervals = min(_MAX_POINTS - 1, max(2, math.ceil((hi - lo) / step)))
    intervals += intervals % 2  # Simpson needs an even count
    z = np.linspace(lo, hi, intervals + 1)
    w = np.ones(intervals + 1)
    w[1:-1:2], w[2:-1:2] = 4.0, 2.0
    w *= (hi - lo) / (3.0 * intervals)
    mean, sd = _kernel_mean_sd(prev, info, drift)
    x = (z[:, None] * math.sqrt(info) - mean[None, :]) / sd
    density = (np.exp(-0.5 * x * x) @ prev.wf) * math.sqrt(info) / (sd * math.sqrt(2.0 * math.pi))
    return _Mass(z, w * density, info)


def _step(info: np.ndarray, k: int) -> float:
    """Grid step at look k: a sixth of the next increment's sd on the Z_k scale, at most _MAX_STEP."""
    if k + 1 >= len(info):
        return _MAX_STEP
    return min(_MAX_STEP, math.sqrt((info[k + 1] - info[k]) / info[k]) / 6.0)


def _solve_fail(mass: _Mass, info: float, target: float) -> float:
    """a with P(continue to this look and Z < a | delta = 0) = target (no PASS boundary)."""
    return _root(lambda a: _exits(mass, info, 0.0, a, math.inf)[0] - target, -40.0, 40.0)


def _solve_pass(mass: _Mass, info: float, drift: float, fail: float, target: float) -> float:
    """b >= fail with P(continue to this look, Z >= b | delta = drift) = target (callers check it exists)."""
    top = drift * math.sqrt(info) + 40.0
    return _root(lambda b: target - _exits(mass, info, drift, fail, b)[1], fail, top)


def _root(func, lo: float, hi: float) -> float:
    """The root of an increasing func on [lo, hi], where func(lo) < 0 < func(hi)."""
    return float(brentq(func, lo, hi, xtol=1e-10, rtol=1e-12, maxiter=200))


def fail_boundaries(info: np.ndarray, alpha: float, spending: Spending) -> np.ndarray:
    """a_k such that P(first Z_k < a_k at look k | delta = 0, no PASS boundary) = the alpha spent at k."""
    info = _checked(info)
    spend = spending.increments(info / info[-1], alpha)
    bounds = np.empty(len(info))
    mass = _START
    for k, target in enumerate(spend):
        if target < _NO_SPEND:
            bounds[k] = -math.inf
        else:
            bounds[k] = _solve_fail(mass, info[k], target)
        mass = _advance(mass, info[k], 0.0, bounds[k], math.inf, _step(info, k))
    return bounds


def pass_boundaries(info: np.ndarray, fail: np.ndarray, beta: float, spending: Spending, drift: float) -> np.ndarray:
    """b_k such that P(first Z_k >= b_k at look k | delta = drift, both boundaries) = the beta spent at k;
    b_K = a_K. Where the continuation mass cannot supply the spend, b_k = a_k: the test decides at that look."""
    info = _checked(info)
    spend = spending.increments(info / info[-1], beta)
    bounds = np.array(fail, dtype=float, copy=True)
    mass = _START
    for k in range(len(info) - 1):
        lo = fail[k]
        if mass.z.size == 0:  # every path has stopped: later looks are forced decisions
            break
        if spend[k] < _NO_SPEND:
            bounds[k] = math.inf
        elif _exits(mass, info[k], drift, lo, lo)[1] <= spend[k]:
            bounds[k] = lo
        else:
            bounds[k] = _solve_pass(mass, info[k], drift, lo, spend[k])
        mass = _advance(mass, info[k], drift, lo, bounds[k], _step(info, k))
    return bounds


def crossing_probabilities(
    info: np.ndarray, fail: np.ndarray, pass_: np.ndarray, drift: float
) -> tuple[np.ndarray, np.ndarray]:
    """Per look: P(the test stops there with FAIL), P(it stops there with PASS), under delta = drift. The last
    look takes everything still running (its PASS boundary is its FAIL boundary)."""
    info = _checked(info)
    p_fail, p_pass = np.zeros(len(info)), np.zeros(len(info))
    mass = _START
    for k in range(len(info)):
        if mass.z.size == 0:
            break
        hi = fail[k] if k == len(info) - 1 else pass_[k]
        p_fail[k], p_pass[k] = _exits(mass, info[k], drift, fail[k], hi)
        if k < len(info) - 1:
            mass = _advance(mass, info[k], drift, fail[k], hi, _step(info, k))
    return p_fail, p_pass


def _checked(info: np.ndarray) -> np.ndarray:
    info = np.asarray(info, dtype=float)
    if info.ndim != 1 or info.size == 0 or info[0] <= 0 or np.any(np.diff(info) <= 0):
        raise ValueError("information levels must be positive and strictly increasing")
    return info
