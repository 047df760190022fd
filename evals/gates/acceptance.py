"""The acceptance-length gate: catches a drafter that collapsed, which every accuracy gate misses (greedy
speculative decoding is lossless, so a drafter accepting nothing still scores the same).

References live in TensorRT-LLM's layout (`references/acceptance_length.yaml`): a mapping from test id to
`{ref_al: float, min_al: float}`, plus optional keys of ours beside them: `method` (the spec method's registry name;
eagle3 when absent), `ref_per_position: [r0, r1, ...]`, `max_draft_len`, `model`, `draft_model`, `task`, `engine`,
`definition`, `source`. `ref_al: null` marks a stub still to be measured.

Acceptance length (AL) here is ours (`AcceptanceStats`): 1 + accepted drafts / draft cycles, bonus token
included; the per-position rate i is the fraction of cycles whose draft i was accepted (they sum to AL - 1).
TensorRT-LLM's accuracy harness ((accepted + requests with drafts) / requests with drafts, summed over
iterations) and vLLM's (1 + accepted / drafts) are the same quantity.

The gate (`acceptance_gate`) FAILs
- below `min_al`: TensorRT-LLM's collapse tripwire (`min_al = 0.95 ref_al` as its populate switch writes it);
- when |AL - ref_al| > rtol * ref_al: a move in either direction, as vLLM's acceptance test checks it (a rise
  means the drafter, the verifier or the metric changed, and the reference no longer describes the run);
- when a per-position rate falls below ref * (1 - rtol), where per-position references exist (one-sided, as
  vLLM checks them), or below ref - slack_i where that position's own sampling error (slack_i) is the larger, as
  for AL: a per-position rate of ten questions moves by far more than 5% by chance.

Every verdict with a band states the gate's power (`power`, from `acceptance_power`: the run's own
sampling error, the smallest drop it detects, what a drop to min_al gets, how many documents would do better), and a
PASS within a band whose floor lies below min_al says that this PASS does not rule out the regression the test id
exists for (`power.band_wider_than_min_al`; `run`, `report` and `decide` show it), never a bare PASS.

The references file itself (reading it, and `--populate-acceptance` editing it) is `acceptance_file`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...workers.spec.metrics import AcceptanceStats
from ..run_types import EvalOptions
from .acceptance_power import band_floor, gate_power, underpowered_note
from .references import REFERENCE_DIR

ACCEPTANCE_PATH = REFERENCE_DIR / "acceptance_length.yaml"
MIN_AL_FRACTION = 0.95  # TensorRT-LLM's populate: min_al = 0.95 * ref_al
DEFAULT_RTOL = EvalOptions.acceptance_rtol  # vLLM's acceptance test's 0.05: `run --acceptance-rtol`'s default
EARLY_MIN_CYCLES = 256
EARLY_FRACTION = 0.5
DEFAULT_METHOD = "eagle3"  # what an entry without a `method` key measured
NO_POWER = (
    "not stated: the run gave no sampling error of its AL (fewer than two requests with draft cycles, or no "
    "per-request counts), so what drop this band can see is unknown"
)


def acceptance_path(options: EvalOptions) -> Path:
    """The acceptance-length references file of a run: --acceptance-refs, else the shipped one."""
    return Path(options.acceptance_refs) if options.acceptance_refs else ACCEPTANCE_PATH


def acceptance_gate(
    test_id: str,
    acceptance: Mapping[str, Any],
    refs: Mapping[str, Mapping[str, Any]],
    rtol: float = DEFAULT_RTOL,
    slack: float = 0.0,
    position_slacks: Sequence[float] = (),
    temperature: float = 0.0,
) -> dict[str, Any]:
    """The verdict of a run's acceptance (AcceptanceStats.to_dict()) against the entry for test_id. `slack`: the
    run's own sampling error of AL (absolute; e.g. 2.58 standard errors over its requests): a small run is judged
    within max(rtol x ref_al, slack) of ref_al and above min_al - slack, so that ten questions do not fail a
    healthy drafter by chance; on a full set the slack is far below rtol x ref_al and the gate is TensorRT-LLM's.
    `position_slacks`: the same sampling error for each per-position rate (absolute), applied the same way.
    `temperature`: what the run decoded at; an entry applies only to the decoding it was measured under."""
    if not 0 <= rtol < 1:
        raise ValueError(f"rtol must lie in [0, 1), got {rtol}")
    impossible = counts_problem(acceptance)
    if impossible is not None:  # evidence no drafter can give: the gate cannot judge, and never passes
        return {
            "verdict": "NO-GATE",
            "acceptance_length": None,
            "ref_al": None,
            "min_al": None,
            "rtol": rtol,
            "slack": round(slack, 4),
            "band": None,
            "power": None,
            "per_position": [],
            "test_id": test_id,
            "reason": f"impossible acceptance counts ({impossible}): no acceptance length",
        }
    al, rates = _measured(acceptance)
    entry = refs.get(test_id) or {}
    ref_al, min_al = _float_or_none(entry.get("ref_al")), _float_or_none(entry.get("min_al"))
    ref_rates = [float(r) for r in entry.get("ref_per_position") or []]
    result = {
        "verdict": "NO-REFERENCE",
        "acceptance_length": al,
        "ref_al": ref_al,
        "min_al": min_al,
        "rtol": rtol,
        "slack": round(slack, 4),
        "band": None,
        "power": None,
        "reason": "",
        "per_position": [],
        "test_id": test_id,
    }
    if ref_al is None:
        stub = f"the reference for {test_id} is a stub (ref_al: null): populate it from a run"
        result["reason"] = stub if entry else f"no acceptance-length reference for {test_id}"
        result["per_position"] = _positions(rates, [], rtol, checked=False)
        return result
    if min_al is None:
        min_al = result["min_al"] = MIN_AL_FRACTION * ref_al
    decoding = decoding_problem(entry, temperature)
    if decoding is not None:
        result["reason"] = decoding
        result["per_position"] = _positions(rates, [], rtol, checked=False)
        return result
    k_ref, k_run = entry.get("max_draft_len"), acceptance.get("max_draft_len")
    if k_ref is not None and k_run is not None and int(k_ref) != int(k_run):
        result["reason"] = f"the reference was measured with max_draft_len {k_ref}, this run used {k_run}"
        result["per_position"] = _positions(rates, [], rtol, checked=False)
        return result
    result["per_position"] = positions = _positions(rates, ref_rates, rtol, checked=True, slacks=position_slacks)
    failures = _failures(al, ref_al, min_al, rtol, positions, acceptance, slack)
    result["verdict"] = "FAIL" if failures else "PASS"
    result["band"] = band = acceptance_band(ref_al, min_al, rtol, slack)
    power = gate_power(ref_al, min_al, rtol, slack, acceptance.get("num_requests"))
    result["power"] = power.to_json() if power else {"statement": NO_POWER}
    within = f"[{band['low']:.3f}, {band['high']:.3f}] (ref_al {ref_al:.3f} +- {band['tolerance']:.0%}"
    within += f" with sampling slack {slack:.3f})" if slack else ")"
    if failures:
        result["reason"] = "; ".join(failures)
        return result
    reason = f"acceptance length {al:.3f} within {within}"
    if power is not None and power.band_wider_than_min_al:
        reason += f"; but {underpowered_note(ref_al, min_al, band['low'])}"
    result["reason"] = f"{reason}; power: {result['power']['statement']}"
    return result


def acceptance_band(ref_al: float, min_al: float, rtol: float, slack: float) -> dict[str, float]:
    """The interval the gate passes an acceptance length in, exactly as `_failures` applies it: the relative
    tolerance is max(rtol, slack / ref_al) in either direction, and the collapse tripwire min_al - slack bounds it
    from below. Written into the gate's result, so that every reader shows the band the gate used."""
    tolerance = max(rtol, slack / ref_al)
    return {"low": band_floor(ref_al, min_al, rtol, slack), "high": ref_al * (1 + tolerance), "tolerance": tolerance}


def _failures(al, ref_al, min_al, rtol, positions, acceptance, slack=0.0) -> list[str]:
    if not acceptance.get("num_cycles", 1):
        return ["no draft cycles: the run drafted nothing"]
    failures = []
    if al < min_al - slack:
        failures.append(
            f"acceptance length {al:.3f} < min_al {min_al:.3f}{_slack(slack)} (ref_al {ref_al:.3f}): collapse tripwire"
        )
    move = (al - ref_al) / ref_al
    tolerance = max(rtol, slack / ref_al)
    if abs(move) > tolerance:
        failures.append(
            f"acceptance length {al:.3f} moved {move:+.1%} from ref_al {ref_al:.3f} (tolerance "
            f"+-{tolerance:.0%}; a rise fails too: re-measure the reference if intended)"
        )
    for p in positions:
        if p["verdict"] == "FAIL":
            bound, slack_i = _position_bound(p["ref"], rtol, p.get("slack", 0.0))
            why = (
                f"ref {p['ref']:.4f} - {slack_i:.4f} of sampling error"
                if slack_i > p["ref"] * rtol
                else f"ref {p['ref']:.4f} x (1 - {rtol:g})"
            )
            failures.append(f"position {p['position']} rate {p['rate']:.4f} < {bound:.4f} = {why}")
    return failures


def _slack(slack: float) -> str:
    return f" - {slack:.3f} of sampling error" if slack else ""


def _positions(
    rates: list[float], refs: list[float], rtol: float, checked: bool, slacks: Sequence[float] = ()
) -> list[dict[str, Any]]:
    rows = []
    for i, rate in enumerate(rates):
        ref = refs[i] if i < len(refs) else None
        row = {"position": i, "rate": rate, "ref": ref, "verdict": "NO-REFERENCE"}
        if ref is not None and checked:
            bound, slack = _position_bound(ref, rtol, slacks[i] if i < len(slacks) else 0.0)
            row["verdict"] = "FAIL" if rate < bound else "PASS"
            if slack:  # the position's own sampling error, when the run gave one
                row["slack"] = round(slack, 4)
        rows.append(row)
    return rows


def _position_bound(ref: float, rtol: float, slack: float) -> tuple[float, float]:
    """(the lowest rate a position passes at, its sampling slack): within max(rtol x ref, slack) of ref."""
    return min(ref * (1 - rtol), ref - slack), slack


def reference_id(test_id: str, conditions: Mapping[str, Any] | None, spec_sampling: str | None = None) -> str:
    """The key of a task's acceptance reference: the test id for a greedy task; for a sampled one, the test id with
    the decoding it was measured under (temperature, top-k, top-p and the spec sampler: acceptance depends on each),
    e.g. `...test_eagle3[v2_kv_cache-one_model-tp1]::sampled[temperature=0.7,top_k=20,top_p=0.9,rejection]`. So a
    sampled run finds only a reference measured under its own decoding, and populating one never touches the greedy
    entry."""
    decoding = sampled_decoding(conditions, spec_sampling)
    if decoding is None:
        return test_id
    parts = [f"{k}={decoding[k]:g}" for k in ("temperature", "top_k", "top_p")] + [decoding["spec_sampling"]]
    return f"{test_id}::sampled[{','.join(parts)}]"


def sampled_decoding(conditions: Mapping[str, Any] | None, spec_sampling: str | None) -> dict[str, Any] | None:
    """What a sampled task decoded under, as its reference entry states it (None: greedy)."""
    temperature = float((conditions or {}).get("temperature") or 0.0)
    if temperature <= 0:
        return None
    return {
        "temperature": temperature,
        "top_k": int(conditions.get("top_k") or 0),
        "top_p": float(conditions.get("top_p") or 1.0),
        "spec_sampling": spec_sampling or "coupled",
    }


def decoding_problem(entry: Mapping[str, Any], temperature: float) -> str | None:
    """Why an acceptance reference does not apply to a run decoded at `temperature`, or None. An entry applies to
    the decoding it was measured under: its `temperature`, absent meaning greedy (every shipped entry was measured
    greedy). Acceptance falls as temperature rises (a sampled target token matches the draft less often), so a
    sampled run judged against a greedy reference FAILs a healthy drafter: at T = 1 the embedded default's clean
    rejection-sampled run fell below the greedy band."""
    measured = float(entry.get("temperature") or 0.0)
    if abs(measured - temperature) < 1e-9:
        return None
    ref = "greedy" if measured == 0 else f"at temperature {measured:g}"
    run = "decodes greedily" if temperature == 0 else f"samples at temperature {temperature:g}"
    return f"the reference was measured {ref}, this run {run} (acceptance depends on the temperature)"


def acceptance_early_fail(
    test_id: str,
    acceptance: Mapping[str, Any],
    refs: Mapping[str, Mapping[str, Any]],
    min_cycles: int = EARLY_MIN_CYCLES,
    fraction: float = EARLY_FRACTION,
    temperature: float = 0.0,
) -> dict[str, Any] | None:
    """After the first batch(es): the FAIL verdict when the acceptance gate can already fail, else None.
    `temperature`: what the run decodes at; as for the full gate, an entry applies only to the decoding it was
    measured under (a sampled run's drafter is never tripped by a greedy reference).

    The rule is deliberately crude and conservative: with at least `min_cycles` draft cycles, FAIL when the
    accepted drafts per cycle (AL - 1) are below `fraction` of what min_al demands, i.e.
    AL < 1 + fraction * (min_al - 1). A random or collapsed drafter sits at AL ~ 1.0, far below; a healthy one
    moves by a few hundredths between batches of a few hundred cycles, so it cannot get there. Everything else
    (a drop of a few percent, a rise, per-position rates) waits for the full run's `acceptance_gate`."""
    if counts_problem(acceptance) is not None:  # no early verdict from impossible counts: the full gate says so
        return None
    al, _ = _measured(acceptance)
    entry = refs.get(test_id) or {}
    ref_al = _float_or_none(entry.get("ref_al"))
    cycles = int(acceptance.get("num_cycles", 0))
    if ref_al is None or cycles < min_cycles:
        return None
    result = acceptance_gate(test_id, acceptance, refs, temperature=temperature)
    if result["verdict"] == "NO-REFERENCE":
        return None
    limit = 1 + fraction * (result["min_al"] - 1)
    if al >= limit:
        return None
    result["verdict"] = "FAIL"
    result["reason"] = (
        f"early FAIL after {cycles} draft cycles: acceptance length {al:.3f} < {limit:.3f}, "
        f"the point where the drafter keeps under {fraction:.0%} of the accepted drafts that "
        f"min_al {result['min_al']:.3f} requires (ref_al {ref_al:.3f})"
    )
    return result


def counts_problem(acceptance: Mapping[str, Any]) -> str | None:
    """Why a run's acceptance counts (AcceptanceStats.to_dict() layout) are impossible (more accepted than drafted,
    more than K accepted per cycle, an AL that is not a finite number >= 1), or None. Checked before any verdict and
    before any reference is written from them."""
    keys = ("num_cycles", "num_draft_tokens", "num_accepted_drafts")
    if all(isinstance(acceptance.get(k), int) for k in keys):
        stats = AcceptanceStats(int(acceptance.get("max_draft_len") or 0), *(acceptance[k] for k in keys))
        return stats.totals_problem()
    al = acceptance.get("acceptance_length")
    if al is not None and not (is_number(al) and al >= 1):
        return f"acceptance length {al!r} is not a number >= 1"
    return None


def _measured(acceptance: Mapping[str, Any]) -> tuple[float, list[float]]:
    """AL and per-position rates, from the exact counts when present (to_dict rounds the rates)."""
    cycles = acceptance.get("num_cycles")
    if cycles and "num_accepted_drafts" in acceptance:
        al = 1.0 + acceptance["num_accepted_drafts"] / cycles
        rates = [n / cycles for n in acceptance.get("accepted_per_position", [])]
        return al, rates or [float(r) for r in acceptance.get("per_position_rate", [])]
    if "acceptance_length" not in acceptance:
        raise ValueError("acceptance stats need acceptance_length or num_cycles and num_accepted_drafts")
    return float(acceptance["acceptance_length"]), [float(r) for r in acceptance.get("per_position_rate", [])]


def is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _float_or_none(x: Any) -> float | None:
    return float(x) if is_number(x) else None
