"""How the sampled lossless verdict reads: its one-line basis, the lines of the tests that FAIL, and the numbers its
record keeps of the within-request test and of the direct tests of the rejection sampler's draws. Formatting only:
the judgement is `sampled._verdict`'s."""

from __future__ import annotations

from typing import Any

import numpy as np


def direction(likelihood, level: float) -> str:
    """Which way the likelihood test says the sampler is off, when it is the test that failed."""
    if likelihood.p_value >= level:
        return ""
    if likelihood.z > 0:
        return " (the likely tokens over-drawn: a sampler too sharp)"
    return " (the likely tokens under-drawn: a sampler too flat)"


def draws_numbers(draws) -> dict[str, Any]:
    """The direct tests of the rejection sampler's draws, as the record keeps them."""
    return {
        "test": "the drafts' accept decisions against min(1, p/q) (over the run, and each request's own) and the "
        "tokens emitted at rejections against the residual norm(max(0, p - q)) (randomized PIT, smooth test)",
        "rejections": draws.rejections,
        "outside_residual": draws.outside_residual,
        "residual_p": draws.residual_p,
        "residual_components": [round(c, 3) for c in draws.residual_components],
        "accepts": draws.accepts,
        "accept_z": round(draws.accept_z, 3),
        "accept_p": draws.accept_p,
        "accepts_within_statistic": round(draws.within_statistic, 4),
        "accepts_within_p": draws.within_p,
        "requests": draws.requests,
    }


def draws_failures(draws, level: float) -> list[str]:
    """What the direct tests of the rejection sampler say, one line each where they FAIL."""
    out = []
    if draws.outside_residual:
        out.append(
            f"{draws.outside_residual} token(s) emitted at a rejection have probability 0 in the residual (the "
            f"rejected draft emitted again)"
        )
    if draws.residual_p < level:
        side = "likely" if draws.residual_components[0] < 0 else "unlikely"
        out.append(
            f"the tokens emitted at rejections are not draws from the residual distribution (p = "
            f"{p_text(draws.residual_p)}, its {side} tokens over-drawn)"
        )
    if draws.accept_p < level:
        out.append(
            f"the drafts are accepted {'more' if draws.accept_z > 0 else 'less'} often than min(1, p/q) says "
            f"(z = {draws.accept_z:+.2f})"
        )
    if draws.within_p < level:
        out.append(
            f"the accept decisions within a request are not independent: the requests' accept rates spread "
            f"{draws.within_statistic / max(draws.requests, 1):.2f} x as far as independent decisions' (p = "
            f"{p_text(draws.within_p)})"
        )
    return out


def within_numbers(within, fidelity: Any) -> dict[str, Any]:
    """The within-request test's record: its statistic against its null, and the request whose u sit furthest
    from 1/2 (ties broken by document id, so the same one in any document order)."""
    record: dict[str, Any] = {
        "test": "per-request PIT means against independent draws (sum of z_j^2 over requests; z > 0: requests "
        "spread more than independent draws do)",
        "statistic": round(within.statistic, 4),
        "p": within.p_value,
        "z": round(within.z, 3),
        "requests": within.requests,
    }
    placed = [(doc_id, u) for doc_id, u in zip(fidelity.doc_ids, fidelity.u, strict=True) if len(u)]
    if placed:
        i = max(range(len(placed)), key=lambda j: (abs(within.request_z[j]), repr(placed[j][0])))
        doc_id, u = placed[i]
        record["most_off"] = {
            "doc_id": doc_id,
            "z": round(within.request_z[i], 3),
            "positions": len(u),
            "mean_u": round(float(np.mean(u)), 4),
        }
    return record


def basis_line(u, kinds, pit_p, likelihood, withins, tail, draws, fidelity, target, level) -> str:
    """The verdict's basis in one line: how many positions, on what footing, which tests, what they said (`withins`:
    the within-request test and its weighted form; `draws`: the direct tests where the drafts are known)."""
    within, weighted = withins
    if kinds["conditional"] or kinds["tail"]:
        left_out = kinds["edge"] + kinds["tail"] + kinds["unknown"]
        footing = (
            f"{kinds['exact']:,} exact, {kinds['conditional']:,} conditional on the baseline's top logprobs: "
            f"conservative; {left_out:,} left out"
        )
    else:
        footing = "exact" + (f"; {kinds['edge']:,} at the support's edge left out" if kinds["edge"] else "")
    if kinds["unknown"]:
        footing += f"; {kinds['unknown']:,} whose top logprobs merged tokens that print alike"
    parts = [
        f"sampled: {len(u):,} positions ({footing}), PIT uniformity p = {p_text(pit_p)}, likelihood "
        f"z = {likelihood.z:+.2f} (p = {p_text(likelihood.p_value)}), within requests "
        f"p = {p_text(within.p_value)} (weighted p = {p_text(weighted.p_value)})"
    ]
    if draws is not None:
        parts.append(
            f"{draws.rejections:,} rejections (residual p = {p_text(draws.residual_p)}), {draws.accepts:,} accept "
            f"decisions (z = {draws.accept_z:+.2f}, within requests p = {p_text(draws.within_p)})"
        )
    if tail is not None:
        parts.append(
            f"tail draws {tail['observed']} of at most {tail['expected_at_most']:.1f} expected "
            f"(p = {p_text(tail['p'])})"
        )
    parts.append(f"each test at {level:g}")
    parts.append(f"{len(fidelity.violations)} support violation(s)" if fidelity.violations else "no support violation")
    text = ", ".join(parts)
    if target.tokens:
        text += (
            f"; target logprobs at most {target.max_diff:.2g} nats off the baseline's scoring "
            f"(max over {target.tokens:,} tokens, tolerance {target.tolerance:g})"
        )
    else:
        text += "; target logprobs not checked (the spec-dec run reported none)"
    return text


def p_text(p: float) -> str:
    return f"{p:.2g}" if p < 0.01 else f"{p:.2f}"
