"""The run store: one folder per run (docs/architecture.md, "Results and decisions").

  manifest.json    commit and dirty flag, full configuration, versions, devices, world size, timings
  samples.parquet  one row per sample (task, doc id, prompt hash, output or its hash, extracted answers, ...)
  events.jsonl     every rank's events, merged
  summary.json     per task score, reference, threshold, theta, verdict; acceptance; event counts
  partial/         finished generations of an unfinished run (what --resume reuses)
  .lock            the writer's lock (see below)

A run id is `YYYYMMDD-HHMMSS-<config key>[-N]` (UTC start time). Every file is written atomically, so a killed run never
leaves a torn file behind. A run is finished when summary.json exists.

Unreadable runs. A folder that looks like a run (it has manifest.json, or a run id as its name) but whose
manifest or summary cannot be read (missing, not UTF-8 JSON, not an object, a summary without `verdict` and
`tasks`) is never trusted and never silently dropped: `scan_runs(root)` returns it in `.unreadable` with the
reason, and `runs` / `decide` report it. `list_runs` returns only the readable runs.

One writer per run. Each run folder has an advisory lock (`fcntl.flock` on `<run>/.lock`), held by the process that
writes the run for as long as it keeps the `Run` object that holds it (or until `run.release()`, the end of a
`with run:` block, or the process's death: the OS releases it, so a SIGKILLed run can be resumed at once).
`new_run(root, key)` returns a new run already locked; `Run.try_lock()` / `Run.is_locked()` take and probe the lock.
Which run a command writes (resume a free unfinished one, refuse to repeat a live one, or start anew) is
`claims.acquire_run`'s to decide.
"""

from __future__ import annotations

import calendar
import hashlib
import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..records import RecordError, locks, read_json, read_text
from ..records import write_json as write_record
from ..records.atomic import atomic_open, atomic_write
from ..user_files import describe
from .run_summary import RunSummary
from .sample_record import SampleRecord
from .seal import is_sealed, seal, unseal

DEFAULT_ROOT = "runs"
LOCK_NAME = ".lock"
STORE_LOCK_NAME = ".store.lock"
_RUN_ID = re.compile(r"(\d{8}-\d{6})-([0-9A-Za-z]+)(?:-(\d+))?")


class UnreadableRunError(ValueError):
    """A run file that exists but cannot be read (not JSON, not UTF-8, torn, wrong shape). One-line message."""


def write_json(path: Path, obj: Any, holds_commands: bool = False) -> None:
    """A run file, through the record layer (atomic; scrubbed and owner-only when it holds a command)."""
    write_record(path, obj, holds_commands=holds_commands, sort_keys=True, default=str)


def config_key(config: dict[str, Any]) -> str:
    """A short hash of everything that affects outputs: same key, same samples, so a run can be resumed."""
    canonical = json.dumps(config, sort_keys=True, default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:12]


def parse_run_id(run_id: str) -> tuple[float | None, str | None]:
    """(start time as a UNIX timestamp, config key) from a run id; (None, None) for another name."""
    m = _RUN_ID.fullmatch(run_id)
    if m is None:
        return None, None
    try:
        started = float(calendar.timegm(time.strptime(m.group(1), "%Y%m%d-%H%M%S")))
    except (ValueError, OverflowError):
        return None, m.group(2)
    return started, m.group(2)


def start_time(value: Any) -> float | None:
    """A manifest's `started` as a UNIX timestamp, or None when it is not one a clock can show (a hand-edited
    1e20, NaN, a string): one such value must not take a whole listing down."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        time.gmtime(value)
    except (OverflowError, OSError, ValueError):
        return None
    return float(value)


@dataclass
class Run:
    path: Path
    # The writer's lock when this process holds it (new_run, claim_unfinished, acquire_run, try_lock).
    lock: locks.FileLock | None = field(default=None, compare=False, repr=False)

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def key(self) -> str | None:
        """The config key in the run id."""
        return parse_run_id(self.run_id)[1]

    @property
    def is_finished(self) -> bool:
        return (self.path / "summary.json").exists()

    @property
    def partial_dir(self) -> Path:
        return self.path / "partial"

    # --- the writer's lock -----------------------------------------------------------------------------------

    def try_lock(self, wait_s: float = 0.0) -> locks.FileLock | None:
        """Take the writer's lock (kept in `self.lock` as well); None when another holder has it."""
        if self.lock is not None and self.lock.held:
            return self.lock
        self.lock = locks.try_lock(self.path / LOCK_NAME, wait_s)
        return self.lock

    def is_locked(self) -> bool:
        """Whether a writer holds this run's lock (another process, or this one through another Run object)."""
        return locks.is_locked(self.path / LOCK_NAME)

    def holder_pid(self) -> int | None:
        return locks.holder_pid(self.path / LOCK_NAME)

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    # --- files -----------------------------------------------------------------------------------------------

    def manifest(self) -> dict[str, Any]:
        return _read_json(self.path / "manifest.json")

    def summary(self) -> dict[str, Any]:
        """summary.json as written (see `run_summary` for it typed)."""
        return _read_json(self.path / "summary.json")

    def run_summary(self) -> RunSummary:
        """summary.json as a typed value (`problem()` says whether its shape is one every reader can rely on)."""
        return RunSummary.from_json(self.summary())

    def problem(self) -> str | None:
        """Why this run cannot be read (its manifest, and its summary when it has one), or None if it can."""
        try:
            self.manifest()
            if self.is_finished:
                check_summary(self.summary(), self.path / "summary.json")
        except (OSError, ValueError) as e:
            return str(e)
        return None

    def discard_unstarted(self) -> bool:
        """Remove this run's folder if it is unfinished and holds no finished generation (partial/ has no file
        with content): what a user error found after the folder was made (an unknown --sample, no matching
        reference) leaves behind, which would otherwise list as an interrupted run. Returns whether it was removed.
        The caller holds the run's lock (it made the run)."""
        if self.is_finished:
            return False
        partial = self.partial_dir
        if partial.is_dir() and any(f.is_file() and f.stat().st_size for f in partial.rglob("*")):
            return False
        import shutil

        self.release()
        shutil.rmtree(self.path, ignore_errors=True)
        return not self.path.exists()

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        write_json(self.path / "manifest.json", manifest, holds_commands=True)  # its command line, a server's

    def write_summary(self, summary: dict[str, Any]) -> None:
        write_json(self.path / "summary.json", summary)

    def write_events(self, events: list[dict[str, Any]]) -> None:
        atomic_write(self.path / "events.jsonl", "".join(json.dumps(e, default=str) + "\n" for e in events).encode())

    def events(self) -> list[dict[str, Any]]:
        path = self.path / "events.jsonl"
        if not path.exists():
            return []
        text = _read_text(path)
        out = []
        for no, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except json.JSONDecodeError as e:
                raise UnreadableRunError(f"{path}: line {no} is not JSON ({e.msg})") from None
            if not isinstance(event, dict):
                raise UnreadableRunError(f"{path}: line {no} is not a JSON object")
            out.append(event)
        return out

    def write_samples(self, samples: Sequence[SampleRecord]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        rows = [_flat(_sealed(s.to_row())) for s in samples]
        # from_pylist takes its columns from the first row alone: a key only later rows have (GPQA's sealed_fields
        # after GSM8K's rows) would be dropped without a word. Every row gets every column, in first-seen order.
        columns = list(dict.fromkeys(k for row in rows for k in row))
        table = pa.Table.from_pylist([{k: row.get(k) for k in columns} for row in rows])
        with atomic_open(self.path / "samples.parquet") as f:
            pq.write_table(table, f)

    def samples(self) -> list[SampleRecord]:
        """samples.parquet's rows as `SampleRecord`s, sealed fields unsealed."""
        return [SampleRecord.from_row(row) for row in self.sample_rows()]

    def sample_rows(self) -> list[dict[str, Any]]:
        """samples.parquet's rows as columns and values (a DataFrame's rows), unsealed."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = self.path / "samples.parquet"
        if not path.exists():
            return []
        kind = describe(path)
        if kind is not None:
            raise UnreadableRunError(f"{path}: is {kind}, not a Parquet file")
        try:
            rows = pq.read_table(path).to_pylist()
        except (pa.ArrowException, OSError) as e:
            raise UnreadableRunError(f"{path}: not a readable Parquet file ({str(e).splitlines()[0]})") from None
        return [_unsealed(_unflat(r), path) for r in rows]


def _sealed(sample: dict[str, Any]) -> dict[str, Any]:
    """A sample's `sealed_fields` (e.g. a GPQA output's token ids) stored sealed (`seal`)."""
    fields = sample.get("sealed_fields") or []
    return {k: seal(v) if k in fields and v is not None else v for k, v in sample.items()}


def _unsealed(sample: dict[str, Any], path: Path) -> dict[str, Any]:
    for k in sample.get("sealed_fields") or []:
        if is_sealed(sample.get(k)):
            try:
                sample[k] = unseal(sample[k])
            except ValueError as e:
                raise UnreadableRunError(f"{path}: field {k} of doc {sample.get('doc_id')}: {e}") from None
    return sample


_TASK_NUMBERS = ("score", "reference", "threshold", "theta", "num_samples", "num_failed_requests")


def check_summary(summary: dict[str, Any], path: Path | str = "summary.json") -> None:
    """UnreadableRunError unless the summary has the shape every reader relies on: a verdict and task objects."""
    if not isinstance(summary.get("verdict"), str):
        raise UnreadableRunError(f"{path}: no 'verdict' (cut off or not written by specdec-eval)")
    tasks = summary.get("tasks")
    if not isinstance(tasks, dict) or not all(isinstance(t, dict) for t in tasks.values()):
        raise UnreadableRunError(f"{path}: 'tasks' is not an object of task objects")
    for name, task in tasks.items():
        for key in _TASK_NUMBERS:  # what every reader does arithmetic or number formatting on
            value = task.get(key)
            if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)):
                raise UnreadableRunError(f"{path}: tasks.{name}.{key} is {str(value)[:40]!r}, not a number")
        filters = task.get("filter_scores")
        if filters is not None and not (
            isinstance(filters, dict)
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in filters.values())
        ):
            raise UnreadableRunError(f"{path}: tasks.{name}.filter_scores is not an object of numbers")
    events = summary.get("events")
    if events is not None and not (isinstance(events, dict) and all(isinstance(n, int) for n in events.values())):
        raise UnreadableRunError(f"{path}: 'events' is not an object of counts")


def _flat(sample: dict[str, Any]) -> dict[str, Any]:
    """Parquet wants one type per column: nested values travel as JSON text."""
    return {k: json.dumps(v) if isinstance(v, (dict, list)) else v for k, v in sample.items()}


def _unflat(row: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in row.items():
        if isinstance(v, str) and v[:1] in "[{":
            try:
                v = json.loads(v)
            except json.JSONDecodeError:
                pass
        out[k] = v
    return out


def _read_text(path: Path) -> str:
    """A run file's text: a regular file of at most TEXT_LIMIT bytes (a manifest linked to /dev/zero is an
    unreadable run, not an endless read)."""
    try:
        return read_text(path)
    except RecordError as e:
        raise UnreadableRunError(str(e)) from None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return read_json(path)
    except RecordError as e:
        raise UnreadableRunError(str(e)) from None


# --- listing -------------------------------------------------------------------------------------------------


@dataclass
class UnreadableRun:
    """A run folder that cannot be read, and why. `manifest` is set when only the summary is broken."""

    path: Path
    reason: str
    manifest: dict[str, Any] | None = None

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def started(self) -> float | None:
        """The start time from the manifest, else from the run id; None when neither tells."""
        started = start_time((self.manifest or {}).get("started"))
        return started if started is not None else parse_run_id(self.run_id)[0]


@dataclass
class RunScan:
    runs: list[Run] = field(default_factory=list)  # readable runs, oldest first
    unreadable: list[UnreadableRun] = field(default_factory=list)


def scan_runs(root: str | Path) -> RunScan:
    """Every run under root, oldest first (folder names start with a UTC timestamp): the readable ones and the
    unreadable ones with their reason. A run-id-named folder without a manifest whose lock is held is a run being
    created this instant and is left out; hidden folders and folders that look like neither are ignored."""
    base = Path(root)
    scan = RunScan()
    if not base.is_dir():
        return scan
    for path in sorted(p for p in base.iterdir() if not p.name.startswith(".")):
        has_manifest = (path / "manifest.json").exists()
        if not path.is_dir() or not (has_manifest or _RUN_ID.fullmatch(path.name)):
            continue
        run = Run(path)
        problem = run.problem()
        if problem is None:
            scan.runs.append(run)
        elif not has_manifest and run.is_locked():
            continue  # new_run made the folder and holds its lock; the manifest comes next
        else:
            try:
                manifest = run.manifest()
            except (OSError, ValueError):
                manifest = None
            reason = problem.removeprefix(f"{path}/").removeprefix(f"{path}: ")
            if not has_manifest:
                reason = "no manifest.json"
            scan.unreadable.append(UnreadableRun(path, reason, manifest))
    return scan


def list_runs(root: str | Path) -> list[Run]:
    """The readable runs under root, oldest first. `scan_runs` also returns the unreadable ones."""
    return scan_runs(root).runs


def open_run(ref: str | Path, root: str | Path = DEFAULT_ROOT) -> Run:
    """A run by folder path or by id under root (a unique prefix of the id is enough).

    FileNotFoundError when nothing or several runs match; UnreadableRunError when the run cannot be read."""
    path = Path(ref)
    if (path / "manifest.json").exists():
        run = Run(path)
        problem = run.problem()
        if problem is not None:
            raise UnreadableRunError(f"run {run.run_id} cannot be read: {problem}")
        return run
    scan = scan_runs(root)
    matches = [r for r in scan.runs if r.run_id.startswith(str(ref))]
    broken = [u for u in scan.unreadable if u.run_id.startswith(str(ref))]
    if len(matches) + len(broken) == 1 and broken:
        raise UnreadableRunError(f"run {broken[0].run_id} cannot be read: {broken[0].reason}")
    if len(matches) + len(broken) != 1:
        n = len(matches) + len(broken)
        raise FileNotFoundError(f"no run '{ref}' under {root}" if not n else f"'{ref}' matches {n} runs under {root}")
    return matches[0]


def find_unfinished(root: str | Path, key: str) -> Run | None:
    """The newest readable unfinished run of the configuration key (not locked: `claim_unfinished` locks)."""
    return next((r for r in reversed(list_runs(root)) if not r.is_finished and r.key == key), None)


def find_finished(root: str | Path, key: str) -> Run | None:
    """The newest readable finished run of the configuration key (e.g. the lossless gate's baseline); runs that
    cannot be read are skipped here (`scan_runs` reports them)."""
    return next((r for r in reversed(list_runs(root)) if r.is_finished and r.key == key), None)


# --- creating a run ------------------------------------------------------------------------------------------


def store_lock(root: str | Path) -> locks.FileLock:
    """The store-wide lock (`<root>/.store.lock`) under which runs are claimed and created; held for milliseconds."""
    base = Path(root)
    base.mkdir(parents=True, exist_ok=True)
    return locks.lock(base / STORE_LOCK_NAME)


def create_run(root: str | Path, key: str) -> Run:
    """A new run folder for the configuration key, locked (callers hold `store_lock`; `new_run` does)."""
    if not _RUN_ID.fullmatch(f"00000000-000000-{key}"):
        raise ValueError(f"a run key is letters and digits, got {key!r}")
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    path = Path(root) / f"{stamp}-{key}"
    n = 1
    while True:
        try:
            path.mkdir(parents=True)  # atomic: of two processes, one gets the folder
            break
        except FileExistsError:
            n += 1
            path = Path(root) / f"{stamp}-{key}-{n}"
    run = Run(path)
    run.lock = locks.lock(path / LOCK_NAME)  # only an is_locked probe can hold it now, for microseconds
    return run


def new_run(root: str | Path, key: str) -> Run:
    """A new run folder for the configuration key, its writer's lock held by the returned Run."""
    with store_lock(root):
        return create_run(root, key)
