"""The acceptance-length references file: reading it (test id -> entry, TensorRT-LLM's layout; see `acceptance`) and
`--populate-acceptance` writing a run's AL into it. `populate` edits only that entry's lines, so every other byte
(comments, other entries, line endings) stays as it was, and a populate with unchanged values leaves the file
identical. The judgement against an entry is `acceptance`."""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from ...errors import UserError
from ...records import locks
from ...results.run_summary import RunSummary, Verdict, as_run_summary
from ...results.store import atomic_write
from ...user_files import check_regular, read_limited
from ..tasks.registry import family_named
from .acceptance import (
    ACCEPTANCE_PATH,
    DEFAULT_METHOD,
    MIN_AL_FRACTION,
    counts_problem,
    is_number,
    reference_id,
    sampled_decoding,
)
from .references import parse_yaml, read_yaml
from .registry import gate_keys


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
            if entry.get(key) is not None and not is_number(entry[key]):
                raise UserError(f"{path}: '{test_id}' {key} must be a number or null, got {entry[key]!r}")
        rates = entry.get("ref_per_position")
        if rates is not None and not (isinstance(rates, list) and all(is_number(r) for r in rates)):
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
    failed = [name for name, t in summary.tasks.items() if t.verdict == Verdict.FAIL]
    if failed:
        reasons.append(f"the accuracy gate FAILed on {', '.join(failed)}")
    for key, gate in gate_keys().items():  # the gates judged before this one: the lossless gate's
        failed = [name for name, t in summary.tasks.items() if key in t.gates and t.gates[key].failed]
        if failed:
            reasons.append(f"the {gate} gate FAILed on {', '.join(failed)}")
    if summary.failing_events:
        reasons.append(f"{summary.failing_events} failing event(s)")
    if summary.num_failed_requests:
        reasons.append(f"{summary.num_failed_requests} failed request(s)")
    if summary.verdict == Verdict.FAIL and not reasons:
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
    if not is_number(al) or al < 1:
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
    return is_number(have) and math.isclose(have, want, rel_tol=1e-9, abs_tol=1e-12)


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
