"""The run store: one folder per run (DESIGN.md, "Results and decisions").

  manifest.json    commit and dirty flag, full configuration, versions, devices, world size, timings
  samples.parquet  one row per sample (task, doc id, prompt hash, output or its hash, extracted answers, ...)
  events.jsonl     every rank's events, merged
  summary.json     per task score, reference, threshold, theta, verdict; acceptance; event counts
  partial/         finished generations of an unfinished run (what --resume reuses)

Every file is written atomically (temp file + rename), so a killed run never leaves a torn file behind. A run
is finished when summary.json exists.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_ROOT = "runs"


def atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, obj: Any) -> None:
    atomic_write(path, (json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n").encode("utf-8"))


def config_key(config: dict[str, Any]) -> str:
    """A short hash of everything that affects outputs: same key, same samples, so a run can be resumed."""
    canonical = json.dumps(config, sort_keys=True, default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:12]


@dataclass
class Run:
    path: Path

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def is_finished(self) -> bool:
        return (self.path / "summary.json").exists()

    @property
    def partial_dir(self) -> Path:
        return self.path / "partial"

    def manifest(self) -> dict[str, Any]:
        return _read_json(self.path / "manifest.json")

    def summary(self) -> dict[str, Any]:
        return _read_json(self.path / "summary.json")

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        write_json(self.path / "manifest.json", manifest)

    def write_summary(self, summary: dict[str, Any]) -> None:
        write_json(self.path / "summary.json", summary)

    def write_events(self, events: list[dict[str, Any]]) -> None:
        atomic_write(self.path / "events.jsonl", "".join(json.dumps(e, default=str) + "\n" for e in events).encode())

    def events(self) -> list[dict[str, Any]]:
        path = self.path / "events.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]

    def write_samples(self, samples: list[dict[str, Any]]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pylist([_flat(s) for s in samples])
        path = self.path / "samples.parquet"
        fd, tmp = tempfile.mkstemp(dir=self.path, prefix=".samples.")
        os.close(fd)
        try:
            pq.write_table(table, tmp)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def samples(self) -> list[dict[str, Any]]:
        import pyarrow.parquet as pq

        path = self.path / "samples.parquet"
        if not path.exists():
            return []
        return [_unflat(r) for r in pq.read_table(path).to_pylist()]


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


def _read_json(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist")
    return json.loads(path.read_text(encoding="utf-8"))


def new_run(root: str | Path, key: str) -> Run:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    path = Path(root) / f"{stamp}-{key}"
    n = 1
    while path.exists():
        n += 1
        path = Path(root) / f"{stamp}-{key}-{n}"
    path.mkdir(parents=True)
    return Run(path)


def find_unfinished(root: str | Path, key: str) -> Run | None:
    """The newest unfinished run of the same configuration key: what an identical command resumes."""
    for run in reversed(list_runs(root)):
        if not run.is_finished and run.path.name.split("-")[2:3] == [key]:
            return run
    return None


def list_runs(root: str | Path) -> list[Run]:
    """Runs under root, oldest first (folder names start with a UTC timestamp)."""
    base = Path(root)
    if not base.is_dir():
        return []
    return [Run(p) for p in sorted(base.iterdir()) if (p / "manifest.json").exists()]


def open_run(ref: str | Path, root: str | Path = DEFAULT_ROOT) -> Run:
    """A run by folder path or by id under root (a unique prefix of the id is enough)."""
    path = Path(ref)
    if (path / "manifest.json").exists():
        return Run(path)
    matches = [r for r in list_runs(root) if r.run_id.startswith(str(ref))]
    if len(matches) != 1:
        raise FileNotFoundError(
            f"no run '{ref}' under {root}" if not matches else f"'{ref}' matches {len(matches)} runs under {root}"
        )
    return matches[0]
