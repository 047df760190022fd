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

`populate` writes a run's AL into the file by editing only that entry's lines, so every other byte (comments,
other entries, line endings) stays as it was, and a populate with unchanged values leaves the file identical.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from ...errors import UserError
from ...records import locks
from ...results.run_summary import RunSummary, as_run_summary
from ...results.store import atomic_write
from ...user_files import check_regular, read_limited
from ...workers.spec.metrics import AcceptanceStats
from ..run_types import EvalOptions
from ..tasks.registry import family_named
from .acceptance_power import band_floor, gate_power, underpowered_note
from .references import REFERENCE_DIR, parse_yaml, read_yaml

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


def load_acceptance_references(path: Path = ACCEPTANCE_PATH) -> dict[str, dict[str, Any]]:
    """test id -> entry; {} when the file does not exist. Bad YAML or a malformed entry is a user error."""
    path = Path(path)
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected 'test id: {{ref_al: ..., min_al: ...}}' at the top level")
    for test_id, entry in data.items():
        if not isinstance(entry, dict):
            raise UserError(f"{path}: entry '{test_id}' must be a mapping with ref_al and min_al")
        for key in ("ref_al", "min_al"):
            if entry.get(key) is not None and not _is_number(entry[key]):
                raise UserError(f"{path}: '{test_id}' {key} must be a number or null, got {entry[key]!r}")
        rates = entry.get("ref_per_position")
        if rates is not None and not (isinstance(rates, list) and all(_is_number(r) for r in rates)):
            raise UserError(f"{path}: '{test_id}' ref_per_position must be a list of numbers")
    return data


def find_acceptance_reference(
    refs: Mapping[str, Mapping[str, Any]], method: str = "eagle3", **conditions: Any
) -> str | None:
    """The first test id of spec method `method` whose entry names every given condition with the given value
    (e.g. model=..., max_draft_len=3, task="mt_bench"): how an endpoint run finds a published figure for its
    server. An entry without `method` is an Eagle3 one (the only method before the registry): an ngram server is
    never held to an Eagle3 drafter's figure for the same model and K."""
    for test_id, entry in refs.items():
        if entry.get("method", DEFAULT_METHOD) != method or entry.get("ref_al") is None:
            continue
        if all(entry.get(k) == v for k, v in conditions.items()):
            return test_id
    return None


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
    if al is not None and not (_is_number(al) and al >= 1):
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


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _float_or_none(x: Any) -> float | None:
    return float(x) if _is_number(x) else None


# --- populate: from a run ------------------------------------------------------------------------------------


def populate_refusal(summary: RunSummary | Mapping[str, Any]) -> str | None:
    """Why a run's acceptance length must not become a reference, or None for a clean, passing run. Called after
    the accuracy and lossless gates and before the acceptance gate (a reference that moved is what populating
    re-measures, so that gate's own verdict does not count). A run that FAILed, had a failing event or a failed
    request, or had faults injected (fired or not) measured something other than the drafter at work."""
    summary = as_run_summary(summary)
    reasons = []
    if summary.events.get("fault_injected") or summary.faults_never_fired:
        reasons.append("faults were injected")
    failed = [name for name, t in summary.tasks.items() if t.verdict == "FAIL"]
    if failed:
        reasons.append(f"the accuracy gate FAILed on {', '.join(failed)}")
    lossless = [name for name, t in summary.tasks.items() if t.lossless is not None and t.lossless.failed]
    if lossless:
        reasons.append(f"the lossless gate FAILed on {', '.join(lossless)}")
    if summary.failing_events:
        reasons.append(f"{summary.failing_events} failing event(s)")
    if summary.num_failed_requests:
        reasons.append(f"{summary.num_failed_requests} failed request(s)")
    if summary.verdict == "FAIL" and not reasons:
        reasons.append("the run FAILed")
    return "; ".join(reasons) or None


def populate_from_run(
    summary: RunSummary | Mapping[str, Any], results: list, test_id: str, path: Path, spec_sampling: str | None = None
) -> dict[str, Any]:
    """`--populate-acceptance`: write the run's acceptance length as the reference of its test id (ref_al = AL,
    min_al = 0.95 AL, per-position rates), as TensorRT-LLM's populate switch does, from the first task that
    measured one (GSM8K before GPQA) - only when the run is clean and passing (`populate_refusal`). A sampled
    task's reference goes under its decoding's key (`reference_id`) and states that decoding. Returns the
    record summary.json keeps as "acceptance_populated": what was written, from how many documents and draft
    cycles, or why nothing was ("refused"): also when no task measured an acceptance length (a server whose
    answers carried impossible counts had each refused), since the run was asked to write one."""
    measured = sorted((r for r in results if r.acceptance), key=lambda r: not family_named(r.family).acceptance_first)
    if not measured:
        refusal = populate_refusal(summary)
        why = "no task measured an acceptance length" + (f" (not a clean, passing run: {refusal})" if refusal else "")
        return {
            "test_id": test_id,
            "task": None,
            "ref_al": None,
            "path": str(path),
            "num_documents": 0,
            "num_cycles": 0,
            "changed": False,
            "refused": why,
        }
    r = measured[0]
    conditions = getattr(r, "conditions", None) or {}
    test_id = reference_id(test_id, conditions, spec_sampling)
    decoding = sampled_decoding(conditions, spec_sampling)
    counts = r.acceptance
    cycles = counts["num_cycles"]
    al = 1.0 + counts["num_accepted_drafts"] / cycles if cycles else 1.0
    record: dict[str, Any] = {
        "test_id": test_id,
        "task": r.task,
        "ref_al": al,
        "path": str(path),
        "num_documents": r.num_samples,
        "num_cycles": cycles,
        "changed": False,
    }
    refusal = populate_refusal(summary)
    if refusal is None and not cycles:
        refusal = "the run drafted nothing (no draft cycles)"
    if refusal is None and (impossible := counts_problem(counts)) is not None:
        refusal = f"impossible acceptance counts ({impossible})"
    if refusal is not None:
        record["refused"] = f"not a clean, passing run: {refusal}" if cycles else refusal
    else:
        rates = [n / cycles for n in counts["accepted_per_position"]]
        record["changed"] = populate(path, test_id, al, rates, decoding)
    return record


# --- populate: line edits ------------------------------------------------------------------------------------

_VALUE_LINE = re.compile(
    r"^(?P<head>\s+(?P<key>[A-Za-z_][\w-]*):)(?P<sep>[ \t]*)(?P<value>[^#\r\n]*?)"
    r"(?P<tail>[ \t]*(#[^\r\n]*)?)(?P<end>\r?\n?)$"
)


def populate(
    path: Path,
    test_id: str,
    al: float,
    per_position: list[float] | None = None,
    decoding: Mapping[str, Any] | None = None,
) -> bool:
    """Write ref_al = al and min_al = 0.95 al (and ref_per_position, when given; the sampled decoding it was
    measured under, when given) for test_id, as TensorRT-LLM's populate switch does, but by editing only that entry's
    lines. A missing entry is appended at the end.
    Returns whether the file changed; with the values already there, not one byte is written.

    The read, the edit and the write happen under the file's lock (`lock_path`), so two runs
    populating one file at once both land (without it, each wrote its edit over the file as it had read it)."""
    if not _is_number(al) or al < 1:
        raise ValueError(f"an acceptance length is a number >= 1 (it includes the bonus token), got {al}")
    path = Path(path)
    check_writable(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with locks.lock(lock_path(path)):
            return _populate_locked(path, test_id, al, per_position, decoding)
    except OSError as e:
        raise UserError(f"cannot write the acceptance references {path}: {e.strerror or e}") from None


def lock_path(path: Path) -> Path:
    """The sidecar lock file of a references file: `.<name>.lock` beside it (as waives.txt's)."""
    return path.parent / f".{path.name}.lock"


def check_writable(path: Path) -> None:
    """UserError unless `path` is a file (or a name for one) that can be written: not a folder, and in a writable
    folder (the write replaces the file through a temporary file beside it; a missing folder is made under the
    nearest one that exists), e.g. not on a read-only mount."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"acceptance references {path}: is a folder, not a file")
    check_regular(path, "acceptance references")  # /dev/zero: said before the run, not after it
    folder = next(p for p in (path.parent, *path.parent.parents) if p.exists())  # made if missing
    if not folder.is_dir():
        raise UserError(f"acceptance references {path}: {folder} is a file, so no folder can be made under it")
    if not os.access(folder, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UserError(f"acceptance references {path}: not writable (a read-only file, folder or mount)")


def _populate_locked(
    path: Path, test_id: str, al: float, per_position: list[float] | None, decoding: Mapping[str, Any] | None = None
) -> bool:
    try:
        text = read_limited(path, "acceptance references").decode("utf-8") if path.exists() else ""
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not UTF-8 text (byte {e.start})") from None
    values: dict[str, Any] = {"ref_al": float(al), "min_al": float(f"{MIN_AL_FRACTION * al:.12g}")}
    if per_position is not None:
        values["ref_per_position"] = [round(float(r), 4) for r in per_position]
    values.update(decoding or {})
    before = _parse(path, text)
    if _holds(before.get(test_id), values):
        return False
    lines = text.splitlines(keepends=True)
    start = _entry_line(lines, test_id)
    new_text = "".join(_append_entry(lines, test_id, values) if start is None else _edit_entry(lines, start, values))
    after = _parse(path, new_text)
    kept = {k: v for k, v in after.items() if k != test_id} == {k: v for k, v in before.items() if k != test_id}
    if not kept or not _holds(after.get(test_id), values):
        raise ValueError(f"{path}: could not edit the entry for {test_id} in place; edit it by hand")
    atomic_write(path, new_text.encode("utf-8"))
    return True


def _parse(path: Path, text: str) -> dict[str, Any]:
    data = parse_yaml(text, path) if text.strip() else {}
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected 'test id: {{ref_al: ..., min_al: ...}}' at the top level")
    return data


def _holds(entry: Any, values: dict[str, Any]) -> bool:
    """Whether the entry already has these values (floats equal to 1e-9: a min_al TensorRT-LLM wrote with all
    its digits counts as the same)."""
    if not isinstance(entry, dict):
        return False
    for key, want in values.items():
        have = entry.get(key)
        if isinstance(want, list):
            if not isinstance(have, list) or len(have) != len(want) or not all(map(_close, have, want)):
                return False
        elif isinstance(want, str):
            if have != want:
                return False
        elif not _close(have, want):
            return False
    return True


def _close(have: Any, want: float) -> bool:
    return _is_number(have) and math.isclose(have, want, rel_tol=1e-9, abs_tol=1e-12)


def _entry_line(lines: list[str], test_id: str) -> int | None:
    """Index of the top-level `test_id:` line."""
    for i, line in enumerate(lines):
        if not line.strip() or line[:1] in (" ", "\t", "#"):
            continue
        try:
            parsed = yaml.safe_load(line)
        except yaml.YAMLError:
            continue
        if isinstance(parsed, dict) and test_id in parsed:
            return i
    return None


def _edit_entry(lines: list[str], start: int, values: dict[str, Any]) -> list[str]:
    """Rewrite the value of each key of `values` in the entry's body; add missing ref_al / min_al right under
    the test id and other missing keys at the end of the body. Comments after a value are kept."""
    end = start + 1
    while end < len(lines) and (lines[end][:1] in (" ", "\t") or not lines[end].strip()):
        end += 1
    while end > start + 1 and not lines[end - 1].strip():  # trailing blank lines belong to what follows
        end -= 1
    newline = _newline(lines[start])
    body = [line if line.endswith(("\n", "\r")) else line + newline for line in lines[start + 1 : end]]
    matches = [_VALUE_LINE.match(line) for line in body]
    indent = next((m.group("head")[: -len(m.group("key")) - 1] for m in matches if m), "  ")
    remaining = dict(values)
    out: list[str] = []
    in_old_list = False
    for line, m in zip(body, matches, strict=True):
        if in_old_list and line.strip().startswith("-"):
            continue  # the block-style items of a list now written in flow style
        in_old_list = False
        if m and m.group("key") in remaining:
            value = remaining.pop(m.group("key"))
            out.append(f"{m.group('head')} {_scalar(value)}{m.group('tail')}{m.group('end') or newline}")
            in_old_list = not m.group("value").strip()
        else:
            out.append(line)
    first = [f"{indent}{k}: {_scalar(remaining.pop(k))}{newline}" for k in ("ref_al", "min_al") if k in remaining]
    last = [f"{indent}{k}: {_scalar(v)}{newline}" for k, v in remaining.items()]
    header = lines[start] if lines[start].endswith(("\n", "\r")) else lines[start] + newline
    return lines[:start] + [header] + first + out + last + lines[end:]


def _append_entry(lines: list[str], test_id: str, values: dict[str, Any]) -> list[str]:
    newline = _newline(lines[0]) if lines else "\n"
    out = list(lines)
    if out and not out[-1].endswith(("\n", "\r")):
        out[-1] += newline
    out.append(f"{_key(test_id)}:{newline}")
    out += [f"  {key}: {_scalar(value)}{newline}" for key, value in values.items()]
    return out


def _key(test_id: str) -> str:
    """test_id as a YAML key: plain when it reads back as itself, else double-quoted."""
    try:
        if yaml.safe_load(f"{test_id}: 0") == {test_id: 0}:
            return test_id
    except yaml.YAMLError:
        pass
    return json.dumps(test_id)


def _scalar(value: Any) -> str:
    if isinstance(value, str):
        return value if yaml.safe_load(value) == value else json.dumps(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(repr(float(v)) for v in value) + "]"
    return repr(float(value))


def _newline(line: str) -> str:
    return "\r\n" if line.endswith("\r\n") else "\n"
