"""Runs and samples as pandas DataFrames: what a notebook analysing recorded runs starts from.

    from specdec_eval.results.frames import load_runs, load_samples
    runs = load_runs("runs")                       # one row per run and task
    samples = load_samples("runs/20261204-...")    # one row per sample
    samples.groupby("task")[["score", "acceptance_length"]].mean()

`load_samples` reads samples.parquet through the store (sealed fields unsealed, token ids as lists) and adds the
run's id and each sample's `score`: the fraction of its filters that marked it correct, the per-sample quantity a
task's score is the mean of. `load_runs` is the runs table (the rows `specdec-eval runs`
lists) with its tasks spread out, one row per (run, task); an unfinished run has one row with no task.
`paired_frame` joins two runs' samples on (task, doc_id), as `compare` pairs them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..gates import recorded, shown
from .store import Run, open_run

if TYPE_CHECKING:
    import pandas as pd

KEY = ["task", "doc_id"]
_CORRECT = "correct["
# The runs table's columns per run, then per task (a task's own verdict is `task_verdict`: `verdict` is the run's).
_RUN_COLUMNS = [
    "run_id",
    "started",
    "commit",
    "commit_full",
    "dirty",
    "test_id",
    "gpu",
    "world_size",
    "verdict",
    "finished",
    "live",
    "elapsed_s",
    "num_failing_events",
    "path",
]
_TASK_COLUMNS = {
    "score": "score",
    "reference": "reference",
    "threshold": "threshold",
    "verdict": "task_verdict",
    "num_samples": "num_samples",
}


def samples_frame(samples: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Sample records (as a run stores them) as a DataFrame, columns in first-seen order; the join keys are kept
    as Python objects, so a doc id of 3 and one of "3" stay apart as they do in the store."""
    import pandas as pd

    rows = [dict(s) for s in samples]
    columns = list(dict.fromkeys(k for row in rows for k in row)) or KEY
    frame = pd.DataFrame.from_records(rows, columns=columns)
    for key in KEY:
        frame[key] = pd.Series([row.get(key) for row in rows], index=frame.index, dtype=object)
    return frame


def load_samples(run: Run | str | Path, root: str | Path | None = None) -> pd.DataFrame:
    """One row per sample of a run (a Run, a run folder, or a run id under root): run_id, task, doc_id, score, the
    stored fields (prompt and output hashes, output, output_token_ids, num_output_tokens, acceptance_length,
    extracted[...] and correct[...] per filter, ...). FileNotFoundError when `run` names no run; ValueError when
    the run is unfinished (its samples are recorded only at its end: an empty frame would read as a run of none)."""
    if not isinstance(run, Run):
        if root is None and not (Path(run) / "manifest.json").is_file():
            raise FileNotFoundError(
                f"{run} is not a run folder (it has no manifest.json); to find a run by its id, "
                "pass the runs folder as root"
            )
        run = open_run(str(run), root if root is not None else Path(run).parent)  # a folder: root unused
    if not run.is_finished:
        raise ValueError(
            f"run {run.run_id} is unfinished (running, interrupted or failed): its samples are recorded "
            "when it finishes; `specdec-eval run` with the same options resumes it"
        )
    frame = samples_frame(run.sample_rows())
    frame.insert(0, "run_id", run.run_id)
    correct = [c for c in frame.columns if c.startswith(_CORRECT) and c.endswith("]")]
    # a sample's filters' correctness, as fractions: missing flags (a filter another task has) are left out
    flags = frame[correct].astype("float") if correct else None
    frame.insert(frame.columns.get_loc("doc_id") + 1, "score", flags.mean(axis=1) if flags is not None else None)
    return frame


def load_runs(
    root: str | Path, test_id: str | None = None, commit: str | None = None, gpu: str | None = None
) -> pd.DataFrame:
    """One row per (run, task) of the readable runs under root, oldest first, filtered as `specdec-eval runs` is:
    the run's columns (run_id, started, commit, test_id, gpu, verdict as every reader shows it, ...) and the task's
    (task, score, reference, threshold, task_verdict, num_samples, lossless, acceptance_gate). FileNotFoundError /
    NotADirectoryError when root is not a folder, ValueError when it is one run's folder: a mistyped path must not
    read as a store with no runs."""
    import pandas as pd

    if not Path(root).exists():
        raise FileNotFoundError(f"runs folder {root} does not exist")
    if not Path(root).is_dir():
        raise NotADirectoryError(f"runs folder {root} is a file, not a folder of runs")
    if (Path(root) / "manifest.json").is_file():  # read as a store it holds no runs: an empty frame, silently
        raise ValueError(
            f"{root} is one run's folder, not a folder of runs: load_runs({str(Path(root).parent)!r}) "
            "reads the store it is in, load_samples of it this run's samples"
        )

    from .runs_table import runs_table

    rows = runs_table(root, test_id, commit, gpu).rows
    # each gate's verdict under the key summary.json keeps it (an opt-in gate's only where some run recorded it)
    gates = [g.key for g in recorded() if shown(g, any(g.key in t for r in rows for t in (r["tasks"] or {}).values()))]
    columns = {**_TASK_COLUMNS, **{key: key for key in gates}}
    records = []
    for row in rows:
        run = {k: row.get(k) for k in _RUN_COLUMNS}
        tasks = row["tasks"] or {None: {}}
        for name, task in tasks.items():
            records.append({**run, "task": name, **{new: task.get(old) for old, new in columns.items()}})
    frame = pd.DataFrame.from_records(records, columns=[*_RUN_COLUMNS, "task", *columns.values()])
    frame["started"] = pd.to_datetime(frame["started"], utc=True)
    return frame


def paired_frame(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Two runs' samples joined on (task, doc_id), and on `repeat` where both have it (several samples per
    document): every column once per side (suffixes _a and _b), and `side`: "both", "a" or "b" (a sample only one
    run has). Rows in A's order, then the samples only B has."""
    import pandas as pd

    key = KEY + (["repeat"] if "repeat" in a.columns and "repeat" in b.columns else [])
    joined = a.merge(b, on=key, how="left", suffixes=("_a", "_b"), indicator="side", sort=False)
    only_b = b.merge(a[key], on=key, how="left", indicator="side", sort=False)
    only_b = (
        only_b[only_b["side"] == "left_only"]
        .drop(columns="side")
        .rename(columns={c: f"{c}_b" for c in b.columns if c not in key and c in a.columns})
    )
    out = pd.concat([joined, only_b.assign(side="b")], ignore_index=True)
    out["side"] = out["side"].astype(str).replace({"left_only": "a"})
    return out
