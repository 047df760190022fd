"""Compare two finished runs sample by sample (docs/architecture.md, "Results and decisions").

Per task: accuracy of each run and the delta, an exact McNemar test on per-sample correctness (with several samples
per document, the clustered paired test on per-document means instead: stats.clustered), how many outputs
are token-for-token identical and where the others first diverge, and the acceptance length: each run's overall
figure (accepted tokens per step, from its summary) and the paired per-document test of its relative change
(stats.acceptance_ratio: a paired t on the cycle-weighted AL ratio, documents as clusters): a drop shown at
alpha is flagged (a drafter that got worse, or collapsed, while greedy outputs and so accuracy stay the same), a
drop of `acceptance_drop` (5 %) ruled out at beta is said, and otherwise what this n could have seen. Per run pair:
event-count deltas, and which configuration and environment keys differ. The result is a JSON-able dict;
`render_compare` turns it into text.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..stats.acceptance_ratio import DEFAULT_BETA, DEFAULT_DROP, judge_pairs
from ..stats.clustered import paired_clustered
from ..stats.mcnemar import mcnemar_exact
from .acceptance_paired import by_document, paired_counts
from .paired import first_divergence, groups_of, pair_samples
from .run_summary import RunSummary, TaskSummary
from .sample_record import SampleRecord
from .store import Run

REGRESSION, IMPROVEMENT, NO_CHANGE = "regression", "improvement", "no significant change"
FILTERS = ("strict-match", "flexible-extract")
# Manifest keys that describe where and with what a run ran, rather than what it was asked to do.
ENVIRONMENT_KEYS = ("commit", "dirty", "versions", "devices", "world_size")
_MISSING = object()


def compare_runs(
    run_a: Run,
    run_b: Run,
    alpha: float = 0.05,
    filter: str = "flexible-extract",
    acceptance_drop: float = DEFAULT_DROP,
    beta: float = DEFAULT_BETA,
) -> dict[str, Any]:
    """Compare run B against run A (A is the baseline). Both must be finished.

    alpha: the McNemar test's level, and the paired acceptance test's for showing a drop (one-sided);
    acceptance_drop, beta: the relative AL drop the paired acceptance test rules out at level beta.
    Raises FileNotFoundError for an unfinished run and ValueError when the runs prompted differently.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be between 0 and 1, got {alpha}")
    for run, which in ((run_a, "A"), (run_b, "B")):
        if not run.is_finished:
            raise FileNotFoundError(f"run {which} ({run.run_id}) is unfinished: it has no summary.json")
        if not (run.path / "samples.parquet").is_file():
            # Without its samples nothing pairs, and "0 paired samples: no significant change" would be a verdict
            # on nothing.
            raise FileNotFoundError(
                f"run {which} ({run.run_id}) has no samples.parquet (lost or deleted): "
                "there is nothing to pair sample by sample"
            )
    summary_a, summary_b = run_a.run_summary(), run_b.run_summary()
    manifest_a, manifest_b = run_a.manifest(), run_b.manifest()
    samples_a, samples_b = run_a.samples(), run_b.samples()
    tasks_a, tasks_b = summary_a.tasks, summary_b.tasks
    for run, which, samples, tasks_of in ((run_a, "A", samples_a, tasks_a), (run_b, "B", samples_b, tasks_b)):
        _check_samples_present(run, which, samples, tasks_of)
    pairs = pair_samples(samples_a, samples_b)
    tasks: dict[str, Any] = {}
    acceptance_test = {"drop": acceptance_drop, "alpha": alpha, "beta": beta}
    for task in [t for t in tasks_a if t in tasks_b]:
        tasks[task] = _compare_task(
            pairs.get(task, []),
            _with_fallback(tasks_a[task], summary_a),
            _with_fallback(tasks_b[task], summary_b),
            pairs.unpaired.get(task),
            alpha,
            filter,
            acceptance_test,
        )
    verdicts = [t["verdict"] for t in tasks.values()]
    verdict = REGRESSION if REGRESSION in verdicts else IMPROVEMENT if IMPROVEMENT in verdicts else NO_CHANGE
    return {
        "verdict": verdict,
        "alpha": alpha,
        "filter": filter,
        "run_a": _run_info(run_a, manifest_a, summary_a),
        "run_b": _run_info(run_b, manifest_b, summary_b),
        "tasks": tasks,
        # tasks whose acceptance length fell significantly, paired by document (the verdict above is about accuracy)
        "acceptance_drops": [t for t, r in tasks.items() if (r["acceptance"]["per_document"] or {}).get("drop_shown")],
        "only_in_a": [t for t in tasks_a if t not in tasks_b],
        "only_in_b": [t for t in tasks_b if t not in tasks_a],
        "events": _event_deltas(summary_a.events, summary_b.events),
        "config_diff": diff_dicts(manifest_a.get("config") or {}, manifest_b.get("config") or {}),
        "environment_diff": diff_dicts(
            {k: manifest_a.get(k) for k in ENVIRONMENT_KEYS}, {k: manifest_b.get(k) for k in ENVIRONMENT_KEYS}
        ),
    }


def _with_fallback(task: TaskSummary, summary: RunSummary) -> TaskSummary:
    """A task without per-request acceptance (an endpoint whose answers carry none) gets the run's server-wide
    delta, which keeps its "basis" label: an AL to compare, never paired per request."""
    reported = summary.reported_acceptance
    if task.acceptance or not isinstance(reported, Mapping) or reported.get("acceptance_length") is None:
        return task
    return replace(task, acceptance=dict(reported))


def _check_samples_present(run: Run, which: str, samples: list[SampleRecord], tasks: Mapping[str, TaskSummary]) -> None:
    """FileNotFoundError when the summary counts samples of a task that samples.parquet does not hold (a file cut
    down or replaced): pairing what is left would report "no significant change" about samples never seen."""
    for task, info in tasks.items():
        expected = info.num_samples or 0
        if expected and not any(s.task == task for s in samples):
            raise FileNotFoundError(
                f"run {which} ({run.run_id}): its summary counts {expected} {task} samples but "
                "samples.parquet holds none of them"
            )


def _run_info(run: Run, manifest: dict[str, Any], summary: RunSummary) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "path": str(run.path),
        "test_id": manifest.get("test_id"),
        "commit": manifest.get("commit"),
        "dirty": manifest.get("dirty"),
        "verdict": summary.verdict if summary.recorded_verdict is not None else None,
        "server_failure": summary.server_failure,  # an endpoint run's server failed it: why (its log, a stall)
    }


def _compare_task(
    pairs: list[tuple[SampleRecord, SampleRecord]],
    summary_a: TaskSummary,
    summary_b: TaskSummary,
    unpaired: dict[str, list[Any]] | None,
    alpha: float,
    filter: str,
    acceptance_test: dict[str, Any],
) -> dict[str, Any]:
    missing = [x for pair in pairs for x in pair if filter not in x.correct]
    if missing:
        known = sorted(missing[0].correct)
        raise ValueError(
            f"task {missing[0].task!r} has no per-sample correctness for filter {filter!r} "
            f"(it has: {', '.join(known) or 'none'})"
        )
    b = sum(bool(x.correct[filter]) and not bool(y.correct[filter]) for x, y in pairs)
    c = sum(not bool(x.correct[filter]) and bool(y.correct[filter]) for x, y in pairs)
    p = mcnemar_exact(b, c)
    verdict = NO_CHANGE
    clustered = _clustered(pairs, filter)
    if clustered is not None:  # several samples per document: they are not independent pairs (stats.clustered)
        if clustered["p"] < alpha:
            verdict = REGRESSION if clustered["delta"] < 0 else IMPROVEMENT
    elif p < alpha:
        verdict = REGRESSION if b > c else IMPROVEMENT
    n = len(pairs)
    score_a, score_b = summary_a.score, summary_b.score
    filters_a, filters_b = dict(summary_a.filter_scores or {}), dict(summary_b.filter_scores or {})
    return {
        "n": n,
        "unpaired": unpaired or {"only_a": [], "only_b": []},
        "accuracy_a": {"score": score_a, "filters": filters_a},
        "accuracy_b": {"score": score_b, "filters": filters_b},
        "delta": _delta(score_a, score_b),
        "filter_deltas": {f: _delta(filters_a.get(f), filters_b.get(f)) for f in filters_a if f in filters_b},
        # The McNemar test sees only the paired docs: their accuracy under the tested filter, for reference.
        "paired_accuracy": {
            "a": _pct(sum(bool(x.correct[filter]) for x, _ in pairs), n),
            "b": _pct(sum(bool(y.correct[filter]) for _, y in pairs), n),
        },
        "mcnemar": {"filter": filter, "b": b, "c": c, "p": p},
        **({"clustered": clustered} if clustered is not None else {}),
        "verdict": verdict,
        "outputs": _output_identity(pairs),
        "acceptance": _acceptance(pairs, summary_a.acceptance, summary_b.acceptance, acceptance_test),
    }


def _clustered(pairs: list[tuple[SampleRecord, SampleRecord]], filter: str) -> dict[str, Any] | None:
    """The paired test over documents when a document has several samples (None: one sample each, McNemar's)."""
    if not any(x.repeat or y.repeat for x, y in pairs):
        return None
    ga = groups_of([x for x, _ in pairs], filter)
    gb = groups_of([y for _, y in pairs], filter)
    result = paired_clustered(ga, gb).to_dict()
    result["samples_per_document"] = max(len(v) for v in ga.values())
    return result


def _output_identity(pairs: list[tuple[SampleRecord, SampleRecord]]) -> dict[str, Any]:
    """Token-level identity. Runs recorded before output_token_ids existed fall back to output_hash, without a
    divergence position."""
    divergences: list[dict[str, Any]] = []
    identical = 0
    for x, y in pairs:
        ids_x, ids_y = x.output_token_ids, y.output_token_ids
        if ids_x is None or ids_y is None:
            same, position = x.output_hash == y.output_hash, None
        else:
            position = first_divergence(ids_x, ids_y)
            same = position is None
        if same:
            identical += 1
        else:
            divergences.append({"doc_id": x.doc_id, "position": position})
    n = len(pairs)
    return {
        "identical": identical,
        "divergent": n - identical,
        "identical_rate": identical / n if n else None,
        "first_divergence": divergences,
    }


def _acceptance(
    pairs: list[tuple[SampleRecord, SampleRecord]],
    a: dict[str, Any] | None,
    b: dict[str, Any] | None,
    acceptance_test: dict[str, Any],
) -> dict[str, Any]:
    """The runs' overall acceptance lengths and, over the documents where both samples drafted (spec-dec on both
    sides), the paired per-document test of the relative change (None when no document has both)."""
    length_a = (a or {}).get("acceptance_length")
    length_b = (b or {}).get("acceptance_length")
    # several samples per document: one pair per document, its counts summed over its samples (the unit of the test)
    units = by_document(pairs) if any(x.repeat or y.repeat for x, y in pairs) else pairs
    counts, weighted = paired_counts(units)
    test = judge_pairs(counts, weighted, **acceptance_test)
    per_document = None
    if test is not None:
        per_document = test.to_json()
        per_document["unpaired"] = len(units) - test.n  # documents where a side drafted nothing or recorded nothing
    basis = {"a": (a or {}).get("basis"), "b": (b or {}).get("basis")}  # per-request counts, or the server fallback
    return {
        "a": length_a,
        "b": length_b,
        "delta": _delta(length_a, length_b),
        "per_document": per_document,
        **({"basis": basis} if any(basis.values()) else {}),
    }


def _event_deltas(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, dict[str, int]]:
    return {t: {"a": a.get(t, 0), "b": b.get(t, 0), "delta": b.get(t, 0) - a.get(t, 0)} for t in sorted({*a, *b})}


def _delta(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(b - a, 6)


def _pct(k: int, n: int) -> float | None:
    return 100.0 * k / n if n else None


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as dotted keys; lists and scalars are leaves. An empty dict is a leaf too."""
    if not isinstance(obj, dict) or (not obj and prefix):
        return {prefix: obj}
    out: dict[str, Any] = {}
    for key, value in obj.items():
        out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def diff_dicts(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """Dotted keys whose values differ, sorted: [{"key", "a", "b"}], None where a side lacks the key (with
    "missing": "a" or "b")."""
    flat_a, flat_b = flatten(a), flatten(b)
    out = []
    for key in sorted({*flat_a, *flat_b}):
        va, vb = flat_a.get(key, _MISSING), flat_b.get(key, _MISSING)
        if va == vb:
            continue
        row: dict[str, Any] = {"key": key, "a": None if va is _MISSING else va, "b": None if vb is _MISSING else vb}
        if va is _MISSING or vb is _MISSING:
            row["missing"] = "a" if va is _MISSING else "b"
        out.append(row)
    return out


# --- text ---------------------------------------------------------------------------------------------------------

_MAX_POSITIONS = 10


def _num(x: float | None, digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _signed(x: float | None, digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:+.{digits}f}"


def _commit(info: dict[str, Any]) -> str:
    commit = (info.get("commit") or "unknown")[:10]
    return commit + ("*" if info.get("dirty") else "")


def _value(row: dict[str, Any], side: str) -> str:
    return "(absent)" if row.get("missing") == side else repr(row[side])


def render_compare(result: dict[str, Any]) -> str:
    """The comparison as text, one block per task, then events, configuration and environment differences."""
    a, b = result["run_a"], result["run_b"]
    lines = [
        f"A: {a['run_id']}  commit {_commit(a)}  {a.get('verdict') or ''}".rstrip(),
        f"B: {b['run_id']}  commit {_commit(b)}  {b.get('verdict') or ''}".rstrip(),
    ]
    if a.get("test_id") == b.get("test_id"):
        lines.append(f"test: {a.get('test_id')}")
    else:
        lines.append(f"test: A {a.get('test_id')}  B {b.get('test_id')}")
    for name, t in result["tasks"].items():
        acc_a, acc_b = t["accuracy_a"], t["accuracy_b"]
        lines.append("")
        lines.append(
            f"{name}: {t['n']} paired samples; score A {_num(acc_a['score'])} -> B {_num(acc_b['score'])} "
            f"({_signed(t['delta'])})"
        )
        for f in acc_a["filters"]:
            if f in acc_b["filters"]:
                lines.append(
                    f"  {f}: A {_num(acc_a['filters'][f])} -> B {_num(acc_b['filters'][f])} "
                    f"({_signed(t['filter_deltas'].get(f))})"
                )
        unpaired = t["unpaired"]
        if unpaired["only_a"] or unpaired["only_b"]:
            lines.append(
                f"  unpaired docs: {len(unpaired['only_a'])} only in A, {len(unpaired['only_b'])} only in B "
                "(left out of the test)"
            )
        m, paired = t["mcnemar"], t["paired_accuracy"]
        cl = t.get("clustered")
        if cl is None:
            lines.append(
                f"  McNemar on {m['filter']} (paired accuracy A {_num(paired['a'])} -> B {_num(paired['b'])}): "
                f"{m['b']} right only in A, {m['c']} right only in B, p = {m['p']:.4g} -> {t['verdict']}"
            )
        else:
            lines.append(
                f"  clustered by document on {m['filter']} ({cl['n_docs']} documents, up to "
                f"{cl['samples_per_document']} samples each; {m['b']} samples right only in A, {m['c']} only in B): "
                f"mean difference {_signed(cl['delta'])} points, standard error {_num(cl['se'])}, p = {cl['p']:.4g} "
                f"-> {t['verdict']}"
            )
        out = t["outputs"]
        rate = "n/a" if out["identical_rate"] is None else f"{100 * out['identical_rate']:.1f}%"
        lines.append(f"  outputs: {out['identical']}/{t['n']} token-identical ({rate})")
        if out["first_divergence"]:
            shown = out["first_divergence"][:_MAX_POSITIONS]
            where = ", ".join(f"doc {d['doc_id']} @ {'?' if d['position'] is None else d['position']}" for d in shown)
            more = len(out["first_divergence"]) - len(shown)
            lines.append(f"  first divergence (doc @ token): {where}" + (f", ... {more} more" if more else ""))
        lines += _acceptance_lines(t["acceptance"])
    for key, label in (("only_in_a", "A"), ("only_in_b", "B")):
        if result[key]:
            lines.append(f"tasks only in {label} (not compared): {', '.join(result[key])}")
    changed = {k: v for k, v in result["events"].items() if v["delta"]}
    lines.append("")
    if result["events"]:
        lines.append(
            "events: "
            + ", ".join(f"{k} {v['a']} -> {v['b']} ({v['delta']:+d})" for k, v in result["events"].items())
            + ("" if changed else " (no change)")
        )
    else:
        lines.append("events: none in either run")
    for side, label in (("run_a", "A"), ("run_b", "B")):
        if result[side].get("server_failure"):
            lines.append(f"{label}'s {result[side]['server_failure']}")
    for key, label in (("config_diff", "configuration"), ("environment_diff", "environment")):
        rows = result[key]
        if not rows:
            lines.append(f"{label}: identical")
            continue
        lines.append(f"{label} differs in {len(rows)} key(s):")
        lines += [f"  {r['key']}: {_value(r, 'a')} -> {_value(r, 'b')}" for r in rows]
    lines.append("")
    test = "clustered paired test" if any("clustered" in t for t in result["tasks"].values()) else "McNemar"
    lines.append(f"verdict: {result['verdict']} (alpha {result['alpha']}, {test} on {result['filter']})")
    if result.get("acceptance_drops"):
        lines.append(
            f"ACCEPTANCE DROP: per-document acceptance length fell significantly in "
            f"{', '.join(result['acceptance_drops'])}"
        )
    return "\n".join(lines)


def _acceptance_lines(acc: dict[str, Any]) -> list[str]:
    lines = []
    if acc["a"] is not None or acc["b"] is not None:
        lines.append(
            f"  acceptance length: A {_num(acc['a'], 3)} -> B {_num(acc['b'], 3)} ({_signed(acc['delta'], 3)})"
        )
    for side, basis in (acc.get("basis") or {}).items():
        if basis and str(basis).startswith("server-wide"):
            lines.append(f"  acceptance of {side.upper()}: {basis}; no per-request test on it")
    p = acc.get("per_document")
    if p:
        flag = "  SIGNIFICANT DROP" if p["drop_shown"] else "  significant rise" if p["rise_shown"] else ""
        se = f"SE {p['std_error']:.2%}" if p["n"] >= 2 else "no SE (one document)"
        lines.append(f"  paired by document ({p['n']}): {p['relative']:+.2%}, {se}; {p['reason']}{flag}")
        lines.append(
            f"    ({p['method']}; alpha {p['alpha']:g} for a drop, beta {p['beta']:g} to rule out {p['drop']:.0%})"
        )
    return lines
